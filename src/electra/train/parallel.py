"""Data parallelism applied from outside the model: DDP or FSDP2, and whole states from shards.

    step_model = wrap(model, rt, "ddp" | "fsdp")   # the module the training step calls
    with no_sync(step_model, sync=False): ...      # accumulate without the gradient all-reduce

Under FSDP (``fully_shard`` on every transformer block, then on the root) each process holds a
shard of every parameter, gradient and optimizer state. Checkpoints hold the whole weights
all the same (gathered tensor by tensor, :func:`unsharded`), laid out as in a one-process
run, so every command reads them alike; the optimizer's state, twice the weights, is
written by every rank as its own shard (``torch.distributed.checkpoint``,
:func:`save_sharded_optimizer`), which any run, sharded or not, reads back. In one process
every function here is the identity.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.errors import UserError
from electra.model import blocks
from electra.runtime import Runtime


def wrap(model: nn.Module, rt: Runtime, parallel: str = "ddp",
         find_unused: bool = False, precision: str = "fp32") -> nn.Module:
    """The module a training step calls: ``model`` itself in one process, a DDP wrapper of it,
    or (``fsdp``) ``model`` sharded in place. Call before building the optimizer.
    ``find_unused``: DDP looks for parameters a step leaves without a gradient; ``precision``
    (FSDP, resolved): the run's, for its mixed-precision policy."""
    if not rt.enabled:
        return model
    if parallel == "fsdp":
        _shard(model, rt, precision)
        return model
    from torch.nn.parallel import DistributedDataParallel

    # Buffers: the model has none that training changes (no BatchNorm), so none is broadcast
    # each step. Not static_graph: with it, two processes' first step computed other
    # gradients than one process's (grad norm 19.54 against 19.73; the embeddings are used
    # by both models), which tests/train/test_parallel.py catches.
    return DistributedDataParallel(
        model, device_ids=rt.device_ids, broadcast_buffers=False,
        gradient_as_bucket_view=True, find_unused_parameters=find_unused)


def is_sharded(model: nn.Module) -> bool:
    return any(hasattr(p, "device_mesh") for p in model.parameters())


def _fully_shard() -> Any:
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:  # torch 2.4-2.5
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def _shard(model: nn.Module, rt: Runtime, precision: str) -> None:
    """FSDP2: each transformer block its own unit, the rest (embeddings, heads) the root's."""
    from torch.distributed.device_mesh import init_device_mesh

    # A root that returns a dataclass of tensors (the pretraining objective's output) makes
    # FSDP2 warn about views; nothing modifies them in place, which is what it warns about.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view")
    fully_shard = _fully_shard()
    mesh = init_device_mesh(rt.device.type, (rt.world_size,))
    policy = mixed_precision(precision)
    for block in [m for m in model.modules() if isinstance(m, blocks())]:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def mixed_precision(precision: str) -> Any:
    """FSDP2's policy for a bf16 run (``precision`` resolved): parameters all-gathered and
    used in bf16 (half the traffic and memory of fp32 all-gathers), gradients reduced in
    fp32; the sharded weights and the optimizer stay fp32. fp32 and fp16 (its grad scaler):
    fp32 throughout, autocast doing the rest."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy
    except ImportError:  # torch 2.4-2.5
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy
    if precision != "bf16":
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def no_sync(step_model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """Skip the gradient all-reduce on all but the last accumulation micro-batch."""
    if sync:
        return contextlib.nullcontext()
    if is_sharded(step_model):
        step_model.set_requires_gradient_sync(False)  # type: ignore[operator]
        return _resync(step_model)
    if hasattr(step_model, "no_sync"):  # DDP
        return step_model.no_sync()  # type: ignore[operator]
    return contextlib.nullcontext()


@contextlib.contextmanager
def _resync(model: nn.Module) -> Iterator[None]:
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)  # type: ignore[operator]


def _whole(t: Any) -> Any:
    """A sharded (DTensor) tensor as a whole CPU tensor; a collective, call on every rank."""
    return t.full_tensor().cpu() if hasattr(t, "full_tensor") else t


def unsharded(model: nn.Module, rebuild: Callable[[], nn.Module] | None) -> nn.Module:
    """``model`` itself, or under FSDP an unsharded CPU copy (``rebuild()`` with the gathered
    weights); a collective under FSDP, so call it on every rank."""
    if not is_sharded(model):
        return model
    assert rebuild is not None, "a sharded model needs rebuild() to gather a whole copy"
    full = {k: _whole(v) for k, v in model.state_dict().items()}
    copy = rebuild()
    copy.load_state_dict(full)
    return copy


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a whole optimizer state, sharding each tensor like the parameter it belongs to."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if any(hasattr(p, "device_mesh") for p in params):
        from torch.distributed.tensor import distribute_tensor

        for i, st in state["state"].items():
            p = params[int(i)]
            for k, v in st.items():
                if hasattr(p, "device_mesh") and v.shape == p.shape:
                    st[k] = distribute_tensor(v.to(p.device), p.device_mesh, p.placements)
    optimizer.load_state_dict(state)


def fuse_qkv_state(state: dict[str, Any], optimizer: torch.optim.Optimizer,
                   model: nn.Module) -> dict[str, Any]:
    """An optimizer state saved when each block's query, key and value were three parameters
    (checkpoints before 2026-12), for this model's one fused parameter: the three states'
    moments stacked in Q, K, V order (AdamW's update is elementwise, so the run resumes as it
    would have). Any other state is returned as it is."""
    saved = state["param_groups"]
    if [len(g["params"]) for g in saved] == [len(g["params"]) for g in optimizer.param_groups]:
        return state
    names = {id(p): n for n, p in model.named_parameters()}
    moments: dict[int, Any] = {}
    groups: list[dict[str, Any]] = []
    index = 0  # the parameter's number in the new state
    for old, live in zip(saved, optimizer.param_groups, strict=True):
        ids = iter(old["params"])
        for p in live["params"]:
            width = 3 if names.get(id(p), "").endswith(("qkv.weight", "qkv.bias")) else 1
            parts = [state["state"].get(next(ids, None)) for _ in range(width)]
            if width == 1 and parts[0]:
                moments[index] = parts[0]
            elif all(parts):
                moments[index] = {k: v if k == "step" else torch.cat([q[k] for q in parts])
                                  for k, v in parts[0].items()}
            index += 1
        if next(ids, None) is not None:
            raise UserError("the checkpoint's optimizer state does not fit this model's "
                            "parameters; resume with the electra that wrote it")
        groups.append({**old, "params": list(range(index - len(live["params"]), index))})
    return {"state": moments, "param_groups": groups}


def save_sharded_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer,
                           folder: Path) -> None:
    """Every rank writes its shard of the optimizer's state into ``folder`` with
    ``torch.distributed.checkpoint`` (a collective): nothing is gathered. Keys are the
    parameters' names, so a run of any layout (FSDP, DDP, one process) reads it back."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    _resharded(model)
    dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)},
             checkpoint_id=str(folder))


def load_sharded_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer,
                           folder: Path) -> None:
    """Read what :func:`save_sharded_optimizer` wrote into ``optimizer``, each rank its
    shard (or, unsharded, whole tensors)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    _resharded(model)
    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    try:
        dcp.load(state, checkpoint_id=str(folder))
    except Exception as err:
        if "qkv" not in str(err):
            raise
        raise UserError(f"{folder}: this sharded optimizer state holds query, key and value as "
                        f"three parameters (written before 2026-12); resume it with the "
                        f"electra that wrote it, or start from its weights with "
                        f"`pretrain --init`") from None
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def _resharded(model: nn.Module) -> None:
    """Every FSDP unit back to its sharded parameters: a forward without a backward (the
    validation's) leaves the root's unsharded, and the optimizer holds the sharded ones."""
    for m in model.modules():
        if hasattr(m, "reshard") and hasattr(m, "set_requires_gradient_sync"):  # FSDPModule
            m.reshard()
