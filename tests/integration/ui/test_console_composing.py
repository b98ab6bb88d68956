"""The composer and an input method: Ctrl+Enter that confirms a candidate while text is being
composed (Japanese, Chinese, Korean input) is the input method's key, not a send; only a
Ctrl+Enter once the text is composed sends it."""

from __future__ import annotations

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import sign_in

pytestmark = pytest.mark.timeout(60)

# A keydown as an input method sends it while composing: Chrome marks it isComposing, and
# older engines (and some input methods) give keyCode 229 alone.
_COMPOSING_CTRL_ENTER = """([composing, legacy]) => {
  const input = document.querySelector('[data-testid="composer-input"]');
  const event = new KeyboardEvent("keydown", {
    key: "Enter", code: "Enter", ctrlKey: true, isComposing: composing,
    bubbles: true, cancelable: true,
  });
  if (legacy) Object.defineProperty(event, "keyCode", { value: 229 });
  input.dispatchEvent(event);
  return event.defaultPrevented;
}"""


def test_ctrl_enter_while_composing_does_not_send(
    console: Page, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("Composed and sent."))
    page = sign_in(console, "#/s/composing")
    box = page.get_by_test_id("composer-input")
    box.fill("変換中")
    for flags in ([True, False], [False, True]):
        assert page.evaluate(_COMPOSING_CTRL_ENTER, flags) is False
    page.wait_for_timeout(500)  # a send would have reached the upstream by now
    assert fake_upstream.bodies() == []
    assert box.input_value() == "変換中"
    # once composed, the same keys send
    box.press("Control+Enter")
    page.get_by_test_id("assistant-message").filter(has_text="Composed and sent.").wait_for()
    assert fake_upstream.bodies()[-1]["messages"][-1]["content"] == "変換中"
