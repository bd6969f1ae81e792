"""The models a job trains: the built-in gpt, Hugging Face models, and their FLOPs per token."""
