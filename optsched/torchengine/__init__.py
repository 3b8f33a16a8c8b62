"""A small PyTorch inference engine that measures and executes engine steps on any GPU (or a CPU).

It runs one engine iteration exactly as the cost model describes it (docs/torchengine.md): a batch of
requests, each with ``q`` new tokens whose keys end at position ``k``, over a paged KV cache; the
step is token embedding, then per layer RMSNorm, fused QKV projection, KV write, variable-length
attention of each request's new tokens over its ``k`` keys (causal, aligned to the end), output
projection, RMSNorm and SwiGLU MLP, then the final norm and LM head on the rows that sample and a
copy of the sampled ids to the host. Random weights (timings do not depend on values), every layer
with its own. RoPE is left out (elementwise and small, as in the measurements of
``../shared/data/gpu``).

- :mod:`.shapes`: a Llama-family shape from a Hugging Face ``config.json`` or a built-in name;
- :mod:`.engine`: weights, the paged KV cache and one step; on CUDA each step is captured as a CUDA
  graph and timed with CUDA events, on a CPU it runs eagerly with SDPA attention;
- :mod:`.profile`: a grid of step kinds, measured, fitted (``optsched profile``);
- :mod:`.execute`: a vllm-replay plan executed step by step (``optsched execute --engine torch``),
  written in the vLLM executor's result format.

PyTorch is an optional extra (``pip install 'optsched[torch]'``); nothing here imports it at
package import.
"""
