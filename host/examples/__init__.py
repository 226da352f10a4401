"""Example models built from code (catalog.py names them; onnx_models.py,
tflite_models.py, weights.py build them) and ``edgequal demo`` (demo.py)."""
