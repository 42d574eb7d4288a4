"""DistributedDataParallel communication hooks for optimizers that communicate themselves.

DDP all-reduces every gradient in fp32 before the optimizer runs. DistributedLion needs each rank's
own gradient (it votes on the ranks' local updates, 1 bit per parameter), so under plain DDP it would
vote on an average that every rank already shares: the vote is unanimous and the 30x saving is gone.
``local_gradients_hook`` hands DDP the local gradients back without sending anything. DDP keeps the
rest of its job: the parameter and buffer broadcast at construction, buffer sync in forward,
find_unused_parameters and join. Register it with ``DistributedLion.attach(ddp_model)``, or yourself::

    ddp_model.register_comm_hook(None, pride.ddp_hooks.local_gradients_hook)

With a hook registered DDP does not divide by the world size (the default hook does), so each rank's
gradients are exactly those of the unwrapped model. One difference stays: under
find_unused_parameters, DDP gives a parameter that this rank did not use a zero gradient where the
unwrapped model has none (None abstains in DistributedLion's vote; zeros vote with the momentum).
"""

import logging
import weakref

import torch
import torch.distributed as dist

_log = logging.getLogger("pride")


def local_gradients_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook that communicates nothing: the bucket's gradients stay this rank's."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def has_local_gradients_hook(ddp_model):
    """Whether ``local_gradients_hook`` is registered on this DDP model."""
    return any(hook is local_gradients_hook for hook, _ in getattr(ddp_model, "_comm_hooks", []))


def ddp_models_holding(params):
    """The live DistributedDataParallel models whose parameters include any of ``params``. DDP keeps no
    registry of its instances and marks nothing on the parameters, so this looks through the objects
    the garbage collector tracks: run once per optimizer, not per step."""
    import gc

    from torch.nn.parallel import DistributedDataParallel

    ids = {id(p) for p in params}
    found = []
    objects = gc.get_objects()
    # The types first (a few hundred, collected by C loops): isinstance on every object goes through
    # abc (DDP is a Joinable), twice the time, and most processes hold no DDP model at all.
    ddp_types = {t for t in set(map(type, objects)) if issubclass(t, DistributedDataParallel)}
    for obj in objects if ddp_types else ():
        if type(obj) in ddp_types:
            held = getattr(obj, "_module_parameters", None)
            if held is None:
                held = list(obj.module.parameters())
            if any(id(p) in ids for p in held):
                found.append(obj)
    return found


class OneBitHookState:
    """The state of ``onebit_hook``: its process group, the warm-up length, the iteration count and
    this rank's error-feedback buffers (a worker error and a server error per compressed bucket).

    ``start_iter``: the iterations all-reduced in full precision before compression starts, as DDP does
    by default; any int >= 0.

    Errors belong to parameters, not to bucket numbers. DDP numbers its buckets in the order it reduces
    them and changes them once: a DDP model starts with buckets it guesses (all parameters in one, or
    with ``bucket_cap_mb_list`` the reverse registration order) and rebuilds them in the order the
    gradients became ready, after its first iteration (its second under static_graph; never with
    find_unused_parameters). So each bucket's errors are kept under its *layout*: the names of its
    parameters in the model (``module.named_parameters()``, the same in every process that builds the
    same model), in the bucket's order; tensor ids would not survive a save and load, bucket indices
    and numels do not identify parameters (a rebuilt bucket can have an initial one's index and numel
    and other parameters), and shapes with offsets are ambiguous between same-shaped layers. The
    model is ``model`` (the DDP model or the module it wraps) or, when not given, the one DDP model
    found holding the bucket's parameters at the first compressed iteration (one search of the
    heap; pass ``model`` when several DDP models share parameters). For each bucket DDP hands over:

    - its layout has errors: they are used (the errors of the same elements);
    - its parameters are exactly those of several layouts that have errors (a fresh DDP model's
      initial buckets, for a state loaded from a run that had rebuilt its buckets): each of those
      layouts is compressed on its own, with its errors, so the run goes on as if DDP had the saved
      buckets;
    - otherwise the bucket starts from zero errors, and the errors of the layouts it splits or merges
      with other parameters are dropped. Errors of layouts no bucket used in an iteration are dropped
      at its end.

    Only layouts loaded from a state dict make up a bucket of other parameters or order; a rebuilt
    bucket that merely reorders or merges this run's own layouts starts from zero errors. Hence start_iter
    0 and 1 are safe: the errors of buckets compressed before DDP's rebuild never reach other
    parameters; when DDP rebuilds, the compression error of the iterations before it (one iteration's
    worth, bounded as any error-feedback residual) is dropped instead of fed back, and the rebuilt
    buckets are compressed whole from then on.

    An iteration whose compressed mean is not finite (an overflow on some rank under
    ``torch.amp.GradScaler``, which then skips the step on every rank, as with DDP's own hook) restarts
    that bucket's errors at zero on every rank: an overflowed rank's errors would otherwise stay
    infinite and make every later mean non-finite.

    ``state_dict()`` / ``load_state_dict()`` save and restore the count, start_iter and this rank's
    errors by layout (torch.save / torch.load(weights_only=True) work); save every rank's and load it
    into each rank's new state before the first backward. A fresh model, DDP and optimizer loaded
    from a checkpoint taken after DDP's rebuild then continue the uninterrupted run bit for bit. (A
    checkpoint taken before DDP's rebuild, e.g. after one iteration with start_iter 0, resumes with
    the right errors but not bit for bit: the buckets that run went on with are not known yet. A
    checkpoint loaded into a DDP model with larger buckets keeps compressing in the saved layouts.)
    Errors saved by another rank or world size (rank 0's state loaded on every rank, say) restart at
    zero, with a warning, but their layouts are kept: every rank then compresses DDP's buckets in the
    same units, whichever state it loaded. Errors that no longer fit their layout's size are dropped
    with a warning. A state dict of the old format (errors keyed by bucket index, from pride
    before the layouts) is loaded without its errors, with a warning: an index does not say which
    parameters they belong to.

    ``layout_errors``: {layout: (worker_error, server_error)}; ``errors``: the same by the index of
    the DDP bucket each was last compressed as (for inspection)."""

    def __init__(self, process_group=None, start_iter=10, model=None):
        _check_start_iter(start_iter)
        self.process_group = process_group
        self.start_iter = start_iter
        self.iter = 0
        self.layout_errors = {}  # layout (tuple of parameter names) -> (worker_error, server_error)
        self._owner = {}  # parameter name -> its layout in layout_errors (layouts are disjoint)
        self._bucket_index = {}  # layout -> index of the DDP bucket it was last compressed as
        self._model = None if model is None else weakref.ref(model)  # DDP holds this state: no cycle
        self._names = None  # id(parameter) -> name
        self._parameters = ()  # the named parameters, alive, so that their ids stay theirs
        self._used = set()  # layouts compressed in this iteration
        self._loaded = set()  # layouts loaded and not compressed since
        self._saved_by = None  # (rank, world size) of a loaded state dict, checked at first use
        self._restored = set()  # layouts loaded from a state dict (until dropped): only they may make up
        # a DDP bucket of other parameters or order (see _units)

    @property
    def errors(self):
        """This rank's errors by the index of the DDP bucket each layout was last compressed as (for
        inspection: an index names other parameters after DDP's rebuild; ``layout_errors`` is the state)."""
        return {self._bucket_index[k]: e for k, e in self.layout_errors.items() if k in self._bucket_index}

    def state_dict(self):
        rank, world = _rank_and_world(self.process_group)
        return {"iter": self.iter, "start_iter": self.start_iter, "rank": rank, "world_size": world,
                "layout_errors": [{"params": list(k), "bucket_index": self._bucket_index.get(k, -1),
                                   "worker_error": w.clone(), "server_error": s.clone()}
                                  for k, (w, s) in self.layout_errors.items()]}

    def load_state_dict(self, state):
        _check_start_iter(state["start_iter"])
        self.iter = state["iter"]
        self.start_iter = state["start_iter"]
        self.layout_errors, self._owner, self._bucket_index = {}, {}, {}
        self._used = set()
        old = state.get("errors")
        if old:
            _log.warning("OneBitHookState.load_state_dict: this state dict keys its error-feedback buffers by "
                         "DDP bucket index (saved by an older pride). A bucket index does not say which "
                         "parameters the errors belong to (DDP numbers its initial and its rebuilt buckets "
                         "differently), so its %d error buffers are dropped and every bucket's errors restart "
                         "at zero; iter (%s) and start_iter (%s) are restored.", len(old), self.iter,
                         self.start_iter)
        for entry in state.get("layout_errors", ()):
            layout = tuple(entry["params"])
            self._keep(layout, (entry["worker_error"].clone(), entry["server_error"].clone()))
            if entry.get("bucket_index", -1) >= 0:
                self._bucket_index[layout] = entry["bucket_index"]
        self._loaded = set(self.layout_errors)
        self._restored = set(self.layout_errors)
        self._saved_by = (state.get("rank"), state.get("world_size")) if self.layout_errors else None

    # ---- layouts ------------------------------------------------------------------------------------

    def _keep(self, layout, errors):
        for name in layout:
            if name in self._owner:
                raise ValueError(f"OneBitHookState: parameter {name!r} is in two layouts with errors "
                                 f"({self._owner[name]} and {layout})")
            self._owner[name] = layout
        self.layout_errors[layout] = errors

    def _drop(self, layouts, why):
        loaded = 0
        for layout in layouts:
            del self.layout_errors[layout]
            self._bucket_index.pop(layout, None)
            for name in layout:
                del self._owner[name]
            loaded += layout in self._loaded
            self._loaded.discard(layout)
            self._restored.discard(layout)
        if loaded:
            _log.warning("onebit_hook: %d error buffers of the loaded OneBitHookState are dropped: %s. Resume "
                         "with the DDP settings and model of the saved run to keep them.", loaded, why)
        elif layouts:
            _log.debug("onebit_hook: errors of %d buckets dropped: %s", len(layouts), why)

    def _layout(self, params):
        names = self._names
        if names is None or any(id(p) not in names for p in params):
            names = self._name_parameters(params)
        return tuple(names[id(p)] for p in params)

    def _name_parameters(self, params):
        from torch.nn.parallel import DistributedDataParallel

        if self._model is not None:
            model = self._model()
            if model is None:
                raise RuntimeError("onebit_hook: the model given to OneBitHookState(model=...) no longer exists")
        else:
            modules = {id(m.module): m.module for m in ddp_models_holding(params)}
            if len(modules) != 1:
                raise ValueError(f"onebit_hook: {len(modules)} DDP models hold this bucket's parameters; pass the "
                                 "DDP model to OneBitHookState(model=...) to name them")
            model = next(iter(modules.values()))
        module = model.module if isinstance(model, DistributedDataParallel) else model
        named = list(module.named_parameters())
        names = {id(p): n for n, p in named}
        missing = [tuple(p.shape) for p in params if id(p) not in names]
        if missing:
            raise ValueError(f"onebit_hook: the bucket's parameters of shapes {missing} are not parameters of the "
                             f"OneBitHookState's model ({type(module).__name__})")
        self._names, self._parameters = names, tuple(p for _, p in named)
        return names

    def _units(self, layout, index, splittable):
        """The layouts in which to compress DDP's bucket ``layout``: itself, or the saved layouts that
        make it up exactly (see the class docstring) when its buffer can be split by parameter."""
        if self._saved_by is not None:
            saved_by, self._saved_by = self._saved_by, None
            here = _rank_and_world(self.process_group)
            if saved_by != here and saved_by != (None, None):
                # Another rank's errors are not this rank's, but their layouts are every rank's: a rank that
                # dropped them would compress a fresh DDP model's buckets whole while the ranks that loaded
                # their own state split them by saved layout, and the ranks' calls would differ.
                from .collectives import compressed_allreduce_server_numel

                for saved, (worker, _) in self.layout_errors.items():  # this rank's share of the owners' part
                    owned = compressed_allreduce_server_numel(worker.numel(), self.process_group)
                    self.layout_errors[saved] = (torch.zeros_like(worker), worker.new_zeros(owned))
                _log.warning("onebit_hook: the %d error buffers of the loaded OneBitHookState were saved by rank "
                             "%s of %s, this is rank %s of %s: they restart at zero (their layouts are kept). Save "
                             "and load each rank's own state to keep them.", len(self.layout_errors), saved_by[0],
                             saved_by[1], here[0], here[1])
        if layout in self.layout_errors:
            units = [layout]
        else:
            owners = list(dict.fromkeys(self._owner[n] for n in layout if n in self._owner))
            names = set(layout)
            # Only loaded layouts are worth a split: they continue a saved run (a fresh DDP model's first
            # buckets). This run's own layouts in a rebuilt bucket (merged, or the same parameters in the
            # order their gradients became ready) would otherwise be split on every later iteration, a copy
            # out and back of the bucket each time, to keep one iteration's residual.
            if (splittable and owners and sum(map(len, owners)) == len(layout)
                    and all(names.issuperset(k) and k in self._restored for k in owners)):
                units = owners  # ordered by their first parameter in the bucket: the same on every rank
            else:
                self._drop(owners, f"DDP's bucket {index} {layout} does not match their buckets")
                units = [layout]
        if units == [layout]:
            self._bucket_index[layout] = index
        self._used.update(units)
        return units

    def _errors_for(self, layout, numel, device):
        from .collectives import compressed_allreduce_server_numel

        server_numel = compressed_allreduce_server_numel(numel, self.process_group)
        held = self.layout_errors.get(layout)
        if held is not None and (held[0].numel() != numel or held[1].numel() != server_numel):
            index = self._bucket_index.get(layout)
            self._drop([layout], f"they do not fit the bucket {layout} of {numel} elements "
                       f"({server_numel} owned here)")
            if index is not None:
                self._bucket_index[layout] = index
            held = None
        if held is None:
            held = (torch.zeros(numel, dtype=torch.float32, device=device),
                    torch.zeros(server_numel, dtype=torch.float32, device=device))
            self._keep(layout, held)
        elif held[0].device != device or held[1].device != device:
            held = (held[0].to(device), held[1].to(device))
            self.layout_errors[layout] = held
        self._loaded.discard(layout)
        return held

    def _end_iteration(self):
        self._drop([k for k in self.layout_errors if k not in self._used], "no bucket of this iteration has "
                   "their parameters")
        self._used = set()


def _check_start_iter(start_iter):
    if not (isinstance(start_iter, int) and start_iter >= 0):
        raise ValueError(f"OneBitHookState: start_iter must be a non-negative int, got {start_iter!r}")


def _rank_and_world(group):
    if not dist.is_initialized():
        return None, None
    return dist.get_rank(group), dist.get_world_size(group)


def onebit_hook(state: OneBitHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook that averages each bucket's gradients with pride's 1-bit compressed
    allreduce (pride.compressed_allreduce: signs and one scale per rank, error feedback on workers and
    owners), 2(N-1)/N bits per element instead of DDP's 2(N-1)/N x 32. Any optimizer then runs on the
    compressed mean, the same on every rank. The first ``state.start_iter`` iterations use a plain
    allreduce of the mean in the bucket's dtype, as DDP's default hook. Needs a pride process group::

        state = pride.ddp_hooks.OneBitHookState(start_iter=10, model=ddp_model)
        ddp_model.register_comm_hook(state, pride.ddp_hooks.onebit_hook)

    Errors are kept per parameter layout (see OneBitHookState), so they stay with their parameters
    through DDP's bucket rebuild and a save and load.

    One difference from DDP's default hook: with ``find_unused_parameters=True`` and
    ``gradient_as_bucket_view=True``, a parameter no rank used keeps its place in the compressed bucket,
    and its gradient (zeros, unless zero_grad sets gradients to None) comes back as the compressed mean's
    ±scale there, so an optimizer moves it. Zero gradients set to None, or leave gradient_as_bucket_view
    off, where unused parameters must stay put.
    """
    from .collectives import compressed_allreduce

    group = state.process_group
    world = dist.get_world_size(group)
    buffer = bucket.buffer()
    warm_up = state.iter < state.start_iter
    last = bucket.is_last()
    if last:
        state.iter += 1
    if warm_up:
        buffer.div_(world)
        fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    params = bucket.parameters()
    layout = state._layout(params)
    # A bucket whose buffer is its parameters' gradients one after the other can be split by parameter.
    units = state._units(layout, bucket.index(), sum(p.numel() for p in params) == buffer.numel())
    if units == [layout]:
        flat = buffer if buffer.dtype == torch.float32 else buffer.float()
        worker, server = state._errors_for(layout, flat.numel(), flat.device)
        if last:
            state._end_iteration()
        work = compressed_allreduce(flat, worker, server, group=group, async_op=True)

        def written_back(fut):
            fut.value()
            _restart_errors_if_not_finite(flat, worker, server)
            if flat is not buffer:
                buffer.copy_(flat)
            return buffer

        return work.get_future().then(written_back)

    # DDP's bucket is a union of saved layouts: compress each on its own, with its errors.
    slices, offset = {}, 0
    for name, p in zip(layout, params):
        slices[name] = buffer[offset:offset + p.numel()]
        offset += p.numel()
    flats = []
    for unit in units:
        flat = torch.cat([slices[name] for name in unit]).float()
        flats.append((unit, flat, *state._errors_for(unit, flat.numel(), flat.device)))
    if last:
        state._end_iteration()
    futures = [compressed_allreduce(flat, worker, server, group=group, async_op=True).get_future()
               for _, flat, worker, server in flats]
    # collect_all's future knows no devices: neither it nor a then() on it orders CUDA streams. The
    # future DDP gets is made for the bucket's device, and the callback wait()s on each source, which
    # makes the current stream wait for pride's work on it (and records its tensors there); set_result
    # then records the copies below for DDP's wait().
    done = torch.futures.Future(devices=[buffer.device] if buffer.is_cuda else None)

    def scattered_back(all_done):
        try:
            for f in all_done.value():
                f.wait()
            for unit, flat, worker, server in flats:
                _restart_errors_if_not_finite(flat, worker, server)
                offset = 0
                for name in unit:
                    part = slices[name]
                    part.copy_(flat[offset:offset + part.numel()])
                    offset += part.numel()
        except Exception as e:  # noqa: BLE001 - DDP sees the collective's error on its future
            done.set_exception(e)
            return
        done.set_result(buffer)

    torch.futures.collect_all(futures).then(scattered_back)
    # set_exception keeps the error as a Python value that DDP's C++ side cannot read (it reported "Unable
    # to cast ... to Tensor"); a callback that raises it gives the future DDP waits on a real error.
    return done.then(lambda f: f.value())


def _restart_errors_if_not_finite(mean, worker, server):
    """Zeros a unit's errors where its compressed mean is not finite. The mean is every rank's same
    result, so every rank restarts together. An overflowed rank's worker error, and the owners' server
    errors that averaged it, would otherwise stay non-finite and make every later mean so; GradScaler
    skips the overflowed iteration on every rank, as it does with DDP's own hook."""
    if mean.numel() == 0:
        return
    # aminmax: one pass without a temporary (isfinite().all() is an order of magnitude slower), and NaN
    # propagates to both ends.
    low, high = torch.aminmax(mean)
    finite = torch.isfinite(low) & torch.isfinite(high)
    if mean.is_cuda:  # no host synchronisation inside DDP's pipeline
        worker.masked_fill_(~finite, 0.0)
        server.masked_fill_(~finite, 0.0)
    elif not finite:
        worker.zero_()
        server.zero_()
