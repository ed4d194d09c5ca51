"""`LoopThread`: an asyncio event loop in a daemon thread, and bridges into it.

    loop = LoopThread(make_engine)                      # make_engine() runs on the new loop
    result = loop.call(coro)                            # from a plain thread: block for the result
    result = await loop.acall(coro)                     # from another event loop
    for item in loop.iterate(lambda: agen()): ...       # an async generator, from a thread
    async for item in loop.aiterate(lambda: agen()): ...  # ... or from another event loop
    loop.close()

vLLM's AsyncLLM must live on one event loop; `rumik_app.engine.vllm` keeps it on one of
these, so threads (the sync API) and any number of other loops (a web server's) can use it
at once. Stopping an iteration early cancels the producer on the loop, which is how an
abandoned stream aborts its vLLM request. Library module, tested through tests/vllm.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator

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
        llm, self.llm = getattr(self, "llm", None), None

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
