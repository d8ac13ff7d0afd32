"""Markdown and code rendered into a Word document with python-docx."""
