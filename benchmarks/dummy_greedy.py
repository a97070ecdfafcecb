"""Why a decode benchmark of random (dummy) weights samples: ask one server for a few chats at once, greedy and at
temperature 1.0, and print how many distinct tokens the streams decode at each step.

With random weights a stream's hidden state is mostly its current token's embedding, so greedy decoding falls into a
cycle of one or two tokens, and chats that end in the same chat-template tokens all decode the same token at every
step. An MoE then routes the whole batch to one token's experts: its step reads no more weights at 16 streams than at
one. Sampled, every stream draws its own tokens, and the experts read grow with the batch as they do on real text.

usage: python benchmarks/dummy_greedy.py URL [--streams 3] [--tokens 32]
(URL: an OpenAI-compatible server, such as ``vllm serve MODEL --load-format dummy``; the first model it lists)
"""

from __future__ import annotations

import argparse

import httpx

PROMPTS = (
    "The history of the city begins with a river.",
    "def parse(line): return line.split()",
    "Tell me about the moon landing in 1969 and what it meant.",
    "Write a haiku about autumn leaves.",
    "List three prime numbers above one hundred.",
    "Explain how a hash map handles collisions.",
)


def tokens(client: httpx.Client, url: str, model: str, prompt: str, count: int, temperature: float) -> list[str]:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": count,
            "temperature": temperature, "ignore_eos": True, "logprobs": True}  # fmt: skip
    answer = client.post(f"{url}/v1/chat/completions", json=body).json()
    return [part["token"] for part in answer["choices"][0]["logprobs"]["content"]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    url = args.url.rstrip("/")
    with httpx.Client(timeout=300) as client:
        model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
        for temperature in (0.0, 1.0):
            streams = [tokens(client, url, model, PROMPTS[i % len(PROMPTS)], args.tokens, temperature)
                       for i in range(args.streams)]  # fmt: skip
            steps = min(len(s) for s in streams)
            per_step = [len({s[i] for s in streams}) for i in range(steps)]
            own = [len(set(s)) for s in streams]
            print(f"temperature {temperature}: distinct tokens a step across {args.streams} streams: min "
                  f"{min(per_step)} max {max(per_step)}; distinct tokens within each stream: {own}")  # fmt: skip
            print(f"  first stream: {streams[0][:8]}")


if __name__ == "__main__":
    main()
