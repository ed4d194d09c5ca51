"""vLLM's engine on its own event loop: `LoopThread`; `main_module_hidden` for starting it from any script, and
`compiler_off_in_new_processes` for starting it without compiling.

    loop = LoopThread(make_engine)                      # make_engine() runs on the new loop
    result = loop.call(coro)                            # from a plain thread: block for the result
    result = await loop.acall(coro)                     # from another event loop
    for item in loop.iterate(lambda: agen()): ...       # an async generator, from a thread
    async for item in loop.aiterate(lambda: agen()): ...  # ... or from another event loop
    loop.close()
    with main_module_hidden(), compiler_off_in_new_processes(vllm_config):   # around vLLM's process starts
        llm = AsyncLLM(vllm_config=vllm_config, ...)

vLLM's AsyncLLM must live on one event loop; `rumik_vllm.engine` keeps it on one of
these, so threads (the sync API) and any number of other loops (a web server's) can use it
at once. Stopping an iteration early cancels the producer on the loop, which is how an
abandoned stream aborts its vLLM request. Library module, tested through tests/vllm.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator

from rumik_app.environment import environment

_END = object()


class LoopThread:
    """An asyncio loop in a daemon thread that owns an object made on it (`self.llm`), with
    bridges from plain threads (`call`, `iterate`) and from other event loops (`acall`,
    `aiterate`). `llm` needs `shutdown()`; it is called by `close()`."""

    def __init__(self, make_llm: Callable[[], object], name: str = "vllm-engine-loop"):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

        async def create():  # inside the loop, so AsyncLLM's output handler runs on it
            return make_llm()

        try:
            self.llm = self.call(create())
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise

    def call(self, coro):
        """Run a coroutine on the engine loop from a thread; block for its result."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a blocking VLLMEngine call on its own event loop would deadlock; await the "
                               "async methods (agenerate_batch, asynthesize, astream) instead")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def acall(self, coro):
        """Await a coroutine on the engine loop from any event loop (cancellation propagates)."""
        if asyncio.get_running_loop() is self.loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def _pump(self, agen_fn, put):
        async def pump():
            try:
                async for item in agen_fn():
                    put(item)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, who raises it
                put(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            finally:
                put(_END)

        return asyncio.run_coroutine_threadsafe(pump(), self.loop)

    def iterate(self, agen_fn: Callable[[], AsyncIterator]) -> Iterator:
        """Iterate an async generator (run on the engine loop) from a plain thread."""
        items: queue.Queue = queue.Queue()
        future = self._pump(agen_fn, items.put)
        try:
            while (item := items.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            future.cancel()  # the consumer stopped early: cancel, which aborts the vLLM request

    async def aiterate(self, agen_fn: Callable[[], AsyncIterator]) -> AsyncIterator:
        """Iterate an async generator (run on the engine loop) from any event loop."""
        caller = asyncio.get_running_loop()
        if caller is self.loop:
            async with contextlib.aclosing(agen_fn()) as agen:
                async for item in agen:
                    yield item
            return
        items: asyncio.Queue = asyncio.Queue()

        def put(item):
            with contextlib.suppress(RuntimeError):  # the caller's loop is already closed
                caller.call_soon_threadsafe(items.put_nowait, item)

        future = self._pump(agen_fn, put)
        try:
            while (item := await items.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            future.cancel()

    def close(self) -> None:
        """Shut vLLM down, let the loop's tasks finish, stop the loop (idempotent)."""
        llm = getattr(self, "llm", None)
        self.llm = None

        async def shutdown():
            if llm is not None:
                with contextlib.suppress(Exception):
                    llm.shutdown()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=60)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)


_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def main_module_hidden():
    """Start vLLM's processes without them re-running the caller's `__main__`.

    vLLM starts its engine core with multiprocessing's "spawn" (always on CPU; on GPU once
    CUDA is initialised), and a spawned process first re-imports `__main__`: a script that
    calls `load_engine(..., backend="vllm")` outside `if __name__ == "__main__":` starts
    another engine inside the new process, which multiprocessing refuses, and `python - <<EOF`
    has no file to re-import; either way vLLM only says "Engine core initialization failed
    ... Failed core proc(s): {}". Nothing of `__main__` is needed there (everything vLLM's
    processes receive names vLLM or rumik_vllm), so while the engine starts, `__main__`
    looks like an interactive session's (no `__file__`, no `__spec__`), which multiprocessing
    does not re-import. Restored afterwards; serialised, so concurrent starts nest safely.
    """
    main = sys.modules.get("__main__")
    with _MAIN_LOCK:
        saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
        try:
            if main is not None:
                main.__dict__.pop("__file__", None)
                main.__spec__ = None
            yield
        finally:
            if main is not None:
                main.__dict__.update(saved)
                if "__spec__" not in saved:
                    main.__dict__.pop("__spec__", None)


COMPILE_OFF = "TORCH_COMPILE_DISABLE"  # torch's switch, which vLLM reads too (as its compilation mode none)


@contextlib.contextmanager
def compiler_off_in_new_processes(vllm_config):
    """While vLLM starts its processes: `TORCH_COMPILE_DISABLE=1` in the environment they inherit when
    `vllm_config` compiles nothing on a CPU (enforce_eager, our default there).

    vLLM wraps helpers in torch.compile whatever its compilation mode (the Cohere layer norm, the
    sampler's log-prob ranks, ...), so each engine process still compiled them with inductor at
    its first requests: seconds with a warm compile cache, half a minute with a cold one, for
    helpers the plain function computes as well. With the variable set they run as written, as
    the engine backend's layer norm does. GPUs keep them compiled. Only the new processes get it:
    this process read torch's setting when it imported vLLM, and the variable is restored at once.
    Call it inside `main_module_hidden`, which serialises starts.
    """
    import torch._dynamo.config  # noqa: F401 - read before the variable is set: this process keeps its setting
    from vllm.config import CompilationMode
    from vllm.platforms import current_platform

    eager = current_platform.is_cpu() and vllm_config.compilation_config.mode == CompilationMode.NONE
    with environment({COMPILE_OFF: "1"} if eager else {}):
        yield
