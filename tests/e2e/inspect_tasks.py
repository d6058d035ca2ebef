"""Inspect AI tasks for the live-hook tests, run by a real ``inspect eval`` in a subprocess.

The model is ``mockllm/model`` with a callable that answers each sample
right or wrong from a seeded draw (sample ``i`` has its own skill), with
explicit token usage (without it mockllm counts tokens with a tokenizer it
would download). ``regress_after``: from that generate call on, every answer
is wrong (a regression mid-eval). ``raise_sample`` i and ``raise_call`` j:
the j-th call for sample i raises, an errored epoch. ``delay`` seconds per call keep the eval
running long enough to watch it.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match, pass_at, pass_k
from inspect_ai.solver import generate

ANSWER = "42"


@task
def flaky(
    *,
    samples: int = 8,
    epochs: int = 4,
    seed: int = 0,
    delay: float = 0.0,
    regress_after: int = -1,
    raise_sample: int = -1,
    raise_call: int = 1,
) -> Task:
    rng = random.Random(seed)
    skill = [0.25 + 0.75 * rng.random() for _ in range(samples)]
    calls: dict[int, int] = {}
    total = [0]

    async def answer(messages: list[ChatMessage], *_: Any) -> ModelOutput:
        index = int(messages[-1].text.split()[-1])
        calls[index] = calls.get(index, 0) + 1
        total[0] += 1
        if delay:
            await asyncio.sleep(delay)
        if index == raise_sample and calls[index] == raise_call:
            raise RuntimeError("the sandbox died")
        draw = random.Random(f"{seed}/{index}/{calls[index]}").random()
        right = draw < skill[index] and not (0 <= regress_after < total[0])
        output = ModelOutput.from_content(model="mockllm/model", content=ANSWER if right else "7")
        output.usage = ModelUsage(input_tokens=10, output_tokens=1, total_tokens=11)
        return output

    return Task(
        dataset=[Sample(input=f"question {i}", target=ANSWER, id=i) for i in range(samples)],
        solver=generate(),
        scorer=match(),
        epochs=Epochs(epochs, [pass_k(k) for k in range(1, epochs + 1)] + [pass_at(2)]),
        model=get_model("mockllm/model", custom_outputs=answer),
    )
