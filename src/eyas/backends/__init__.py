"""The one engine layer: a registry of engines (`registry`), one package per engine (`sglang`,
`vllm`, `openai_chat` (lossy, opt-in), `local`: its backend, its options, its acceptance and
server hooks, its conventions), the servers eyas starts (`server`), and the one client policy
every stage sends its requests through (`policy.ServerPool`, configured by
`server_config.ServerConfig`), with failures classified by `reasons`. Nothing here imports a
stage: docs/architecture.md, "Layers"."""
