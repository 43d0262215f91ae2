"""Loaded at interpreter start (PYTHONPATH) by the peers that write https://huggingface.co into their requests
instead of reading HF_ENDPOINT (hf-mem through httpx2, kvfit through urllib): their requests go to the speed
benchmark's local Hub (SPEED_BENCH_HUB_URL) instead.

Nothing is imported here beyond what `site` has already imported: a finder on sys.meta_path waits for the tool
itself to import httpx2 or urllib.request, and rewrites the URL prefix where the request is built
(`httpx2.Client/AsyncClient.build_request`, `urllib.request.Request.full_url`). The tool's code is not changed.
"""

import os
import sys
from importlib.machinery import PathFinder

HUB = os.environ.get("SPEED_BENCH_HUB_URL", "").rstrip("/")
PREFIXES = ("https://huggingface.co", "https://www.huggingface.co")


def _rewrite(url):
    if isinstance(url, str):
        for prefix in PREFIXES:
            if url.startswith(prefix + "/"):
                return HUB + url[len(prefix) :]
    return url


def _patch_httpx2(module):
    base = sys.modules["httpx2._client"].BaseClient
    build = base.build_request

    def build_request(self, method, url, *args, **kwargs):
        return build(self, method, _rewrite(str(url)), *args, **kwargs)

    base.build_request = build_request


def _patch_urllib(module):
    prop = module.Request.full_url

    def setter(self, url):
        prop.fset(self, _rewrite(url))

    module.Request.full_url = property(prop.fget, setter, prop.fdel)


PATCHES = {"httpx2": _patch_httpx2, "urllib.request": _patch_urllib}


class _AfterImport:
    def find_spec(self, name, path=None, target=None):
        patch = PATCHES.pop(name, None)
        if patch is None:
            return None
        if not PATCHES:
            sys.meta_path.remove(self)
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if HUB:
    sys.meta_path.insert(0, _AfterImport())
