"""The OpenAI-compatible images API client and the image edits around it, for generate_image/edit_image."""
