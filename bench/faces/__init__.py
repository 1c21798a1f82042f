"""Faces: MTCNN detection and pretrained face recognizers (dlib, FaceNet, a user's ONNX model)."""
