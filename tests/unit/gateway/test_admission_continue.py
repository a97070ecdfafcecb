"""``continue_final_message`` counted as the engine renders it (gateway/admission/continuation.py): for generated
conversations ending in a message to continue (text with spaces, newlines, the tag's own words; as a string or as
parts), under templates that print the final message once, twice or trimmed, the figure is never below the
engine's own count (tests/fixtures/vllm_truth.py), and equals it where counted exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.unit.gateway.model_folders import copy_folder
from tests.unit.gateway.test_admission_attack_s27 import RECAP, _engine_chat, _figure

TEMPLATES = {
    "recap": RECAP,
    "trimmed": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "parts": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}",
    "flagged": "{% if continue_final_message is defined %}" + "never seen by the engine " * 50 + "{% endif %}"
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}",
}
texts = st.lists(st.sampled_from([*"ab \n\t.é", "CONTINUE_FINAL_MESSAGE_TAG "]), max_size=20).map("".join)


@pytest.fixture(scope="module")
def folders(model_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, template in TEMPLATES.items():
        folder = copy_folder(tmp_path_factory.mktemp(name), model_folder, name)
        (folder / "chat_template.jinja").write_text(template)
        out[name] = folder
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(TEMPLATES)), user=texts, final=texts, as_parts=st.booleans())
def test_a_continued_message_is_never_counted_below_the_engine(
    folders: dict[str, Path], name: str, user: str, final: str, as_parts: bool
) -> None:
    content: Any = [{"type": "text", "text": "x"}, {"type": "text", "text": final}] if as_parts else final
    body = {"model": "m", "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": content}],
            "continue_final_message": True, "add_generation_prompt": False}  # fmt: skip
    try:
        truth = _engine_chat(folders[name], body)
    except ValueError:  # transformers refuses the continuation: the engine answers 400, nothing is prefilled
        assume(False)
    figure = _figure(folders[name], body)
    assert figure.method == "uncounted" or figure.tokens >= truth, (figure, truth)
    if figure.method == "exact":
        assert figure.tokens == truth
