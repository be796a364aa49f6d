"""Models on the card: the layer between the kernels and the tools.

- config, families: a decoder's shape and numerics from config.json or GGUF metadata; the
  families (Qwen3, Llama, SmolLM3) as data; an unknown architecture refused by name
- checkpoint, gguf_file, safetensors_file: model files through their own libraries, one tensor
  at a time, checked against the config
- tokenizer, chat_template: `tokenizers` (tokenizer.json or a GGUF vocabulary) and the model's
  jinja2 chat template rendered as transformers does
- convert: the card formats (int8, fp4, int8x, fp4x6), cached on disk
- layout, image: where a model lives in card DRAM and writing it there
- programs: the step and generate-loop programs in `ol`
- engine: a model on any Backend (sequences, KV pages, the generate loop, run costs);
  hostengine: the references behind the same interface
- reference: the fp32 golden and the quantised golden; sampling: sampling parameters and the
  host's sampler; models: model names (shipped, cached) and opening one; synthetic: random
  models written as real files
"""
