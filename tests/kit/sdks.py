"""The official OpenAI and Anthropic SDKs for the tests that drive the API, imported when a test first uses them:
importing both costs a test process about 2 s, and every test process imports every test module at collection (the
fast tier deselects the API's tests but still collects their files). `from kit.sdks import openai` then
`openai.OpenAI(...)` as with the module itself; name an SDK's class in a test's parameters by its name (a string),
since parameters are made at collection."""
import importlib


class _ImportedOnFirstUse:
    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("_"):  # what pytest looks for on every name of a test module at collection (`_mock_name`)
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)


openai = _ImportedOnFirstUse("openai")
anthropic = _ImportedOnFirstUse("anthropic")
