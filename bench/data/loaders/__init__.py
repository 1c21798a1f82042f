"""Real datasets read from a local root in their official layouts (and users' folders and Hugging Face datasets)."""
