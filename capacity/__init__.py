"""capacity: how a multimodal / encoder-decoder model will use GPU memory under vLLM 0.33 (MRV2)."""

__version__ = "0.1.0"
VLLM_VERSION = "0.33.0"  # the release whose rules the plans mirror by default
