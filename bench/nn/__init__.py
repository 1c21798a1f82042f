"""Networks and their training loops: classifiers, encoders, denoisers, ViT, the streaming trainer and DDP."""
