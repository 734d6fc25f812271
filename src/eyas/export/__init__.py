"""Export: drafter -> SGLang / vLLM formats (with a validator); samples -> peer trainers."""
