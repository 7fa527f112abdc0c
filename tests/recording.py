"""A model backend for tests that remembers what each model call was sent."""

from chaz_nb.engine.backends import LiteLLMBackend


class Recording:
    """The real litellm backend, remembering ``(messages, options)`` of every model call."""

    def __init__(self):
        self.inner = LiteLLMBackend()
        self.calls = []

    async def complete(self, model, messages, tools=None, **kw):
        self.calls.append(([dict(m) for m in messages], kw))
        return await self.inner.complete(model, messages, tools, **kw)
