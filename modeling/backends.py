"""Deprecated: moved to :mod:`as2hub.inference.backends` (issue 50). Every name still resolves here, to the same object,
with a DeprecationWarning naming its new path (:mod:`as2hub.modeling.deprecation`); this module goes in as2hub 0.2.0.
"""

from as2hub.modeling import deprecation as _deprecation


def __getattr__(name):
    from as2hub import inference
    from as2hub.inference import backends

    return _deprecation.moved_attribute(__name__, name, backends, public=inference)


def __dir__():
    from as2hub.inference import backends

    return _deprecation.moved_dir(backends)
