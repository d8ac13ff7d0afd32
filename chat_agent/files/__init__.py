"""Stored files (local or S3), type sniffing, documents, images, and the attachments of a message."""
