"""Deprecated: split in issue 50. The export and int8 quantization moved to :mod:`as2hub.inference.onnx_export`, the
ONNX Runtime session to :mod:`as2hub.inference.onnx_runtime`, the folder facts (``check_ranker_folder``,
``weights_sha256``, the graph file names) to :mod:`as2hub.modeling.folders`. Every name still resolves here, to the
same object, with a DeprecationWarning naming its new path (:mod:`as2hub.modeling.deprecation`); this module goes in
as2hub 0.2.0.
"""

from as2hub.modeling import deprecation as _deprecation


def __getattr__(name):
    from as2hub import inference
    from as2hub.inference import onnx_export, onnx_runtime
    from as2hub.modeling import folders, scores

    # The first that has the name is its home (onnx_export re-imports much of the others)
    return _deprecation.moved_attribute(__name__, name, folders, scores, onnx_runtime, onnx_export, public=inference)


def __dir__():
    from as2hub.inference import onnx_export, onnx_runtime
    from as2hub.modeling import folders, scores

    return _deprecation.moved_dir(folders, scores, onnx_runtime, onnx_export)
