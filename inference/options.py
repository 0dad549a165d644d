"""The rankers' option checks that need no torch: the service's ingress validates requests with them without
loading a model (``as2hub.serving.http``)."""


def check_drop(drop: float) -> None:
    """Raise ``ValueError`` unless ``drop`` is a fraction in [0, 1): the one check of ``cascade_drop``'s range (the
    ranker's, the service's ``--cascade_drop`` and a request's ``cascade_drop``)."""
    if not 0.0 <= drop < 1.0:
        raise ValueError(f"cascade_drop is the fraction of candidates dropped at each head, in [0, 1); got {drop}")
