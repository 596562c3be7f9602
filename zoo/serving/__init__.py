"""A zoo network out of Python and served: the SavedModel TF Serving loads, the TFLite file
LiteRT runs, the ONNX file onnxruntime runs, and the clients that query a model server.

- `saved_model`: `zoo.export` (the TF Serving layout, versions, models.config, warm-up
  requests, provenance);
- `signatures`: the signatures both formats carry (`serving_default`, `logits`, `gates`) and
  how a version is written into an export directory;
- `language_model`: the signatures of a character-aware language model, which take words;
- `tflite`: the `.tflite` file and `zoo.serving.tflite.load` to run it;
- `onnx`: the `.onnx` file (the `onnx` extra: tf2onnx converts, onnxruntime runs it);
- `client`: REST and gRPC requests to a model server, and their responses as arrays.
"""
