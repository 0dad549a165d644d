"""CPU stand-ins of ATen's variable-length flash-attention kernels (CUDA only), for the varlen layout's CPU tests:
each sequence's attention and log-sum-exp with the kernels' output shapes, and the flash backward's formula (no
dropout). Opaque operators, as the ATen ones are to dynamo.

They are ``torch.library`` operators, so they live here, in a helper that every test module imports under one name.
A test module is imported twice in a pytest run when another test module imports it too (pytest's importlib mode
under its own name, ``tests.test_x``, then the ``pythonpath`` import as ``test_x``). Defining an operator a second
time destroys the first registration (``get_library_allowing_overwrite``), and the first module's operator object
then calls a freed dispatcher handle: a crash or a ``MemoryError: std::bad_alloc`` that depends on the order in which
an xdist worker ran its tests (seen on 2026-12-01, AMD EPYC, AVX2). ``test_test_lanes`` keeps operators out of
``test_*.py`` files.
"""

import torch


@torch.library.custom_op("as2hub_test::varlen_forward", mutates_args=())
def varlen_forward_stand_in(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    outputs, logsumexps = [], []
    starts = cu_seqlens.tolist()
    for start, end in zip(starts, starts[1:]):
        q, k, v = (t[start:end].transpose(0, 1).float() for t in (query, key, value))  # (heads, tokens, size)
        scores = q @ k.transpose(1, 2) * scale
        outputs.append((scores.softmax(-1) @ v).transpose(0, 1).to(query.dtype))
        logsumexps.append(scores.logsumexp(-1))
    return torch.cat(outputs), torch.cat(logsumexps, 1)


@varlen_forward_stand_in.register_fake
def _(query, key, value, cu_seqlens, scale):
    return torch.empty_like(query), query.new_empty(query.shape[1], query.shape[0], dtype=torch.float32)


@torch.library.custom_op("as2hub_test::varlen_backward", mutates_args=())
def varlen_backward_stand_in(
    grad: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    logsumexp: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grads = ([], [], [])
    starts = cu_seqlens.tolist()
    for start, end in zip(starts, starts[1:]):
        q, k, v, g = (t[start:end].transpose(0, 1).float() for t in (query, key, value, grad))
        weights = torch.exp(q @ k.transpose(1, 2) * scale - logsumexp[:, start:end, None])
        output = weights @ v
        scores_grad = weights * (g @ v.transpose(1, 2) - (g * output).sum(-1, keepdim=True))
        for into, part in zip(grads, (scores_grad @ k * scale, scores_grad.transpose(1, 2) @ q * scale,
                                      weights.transpose(1, 2) @ g)):  # fmt: skip
            into.append(part.transpose(0, 1))
    return tuple(torch.cat(parts).to(query.dtype) for parts in grads)


@varlen_backward_stand_in.register_fake
def _(grad, query, key, value, logsumexp, cu_seqlens, scale):
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)
