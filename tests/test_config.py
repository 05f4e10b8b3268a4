"""Settings come from sentient.yaml, and environment variables override them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentient.config import load_settings
from sentient.errors import ConfigError


def test_defaults_without_a_config_file(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {})
    assert settings.vault == tmp_path.resolve()
    assert settings.model == "local"
    assert settings.features.memory is True
    assert settings.api.host == "127.0.0.1"
    assert settings.role("helper").model == "local"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("model: ollama_chat/qwen3:8b\nfeatures:\n  memory: true\n")
    env = {"SENTIENT_MODEL": "openai/gpt-4o-mini", "SENTIENT_HELPER_MODEL": "scripted/helper", "SENTIENT_MEMORY": "0"}
    settings = load_settings(tmp_path, env)
    assert settings.model == "openai/gpt-4o-mini"
    assert settings.role("chat").model == "openai/gpt-4o-mini"
    assert settings.role("helper").model == "scripted/helper"
    assert settings.features.memory is False


def test_sentient_vault_names_the_vault(tmp_path: Path) -> None:
    assert load_settings(None, {"SENTIENT_VAULT": str(tmp_path)}).vault == tmp_path.resolve()


def test_a_role_keeps_its_own_model(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text(
        "model: local\nmodels:\n  chat:\n    model: openai/x\n"
        "    api_base: http://127.0.0.1:9/v1\n    api_key_env: MY_KEY\n"
    )
    chat = load_settings(tmp_path, {}).role("chat")
    assert (chat.model, chat.api_base, chat.api_key_env) == ("openai/x", "http://127.0.0.1:9/v1", "MY_KEY")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: [a\n", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("modle: local\n", "modle: Extra inputs are not permitted"),
        ("api:\n  port: high\n", "api.port"),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "sentient.yaml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path, {})
    assert message in caught.value.message
    assert "sentient.yaml" in caught.value.message


def test_a_bad_switch_in_the_environment_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SENTIENT_MEMORY"):
        load_settings(tmp_path, {"SENTIENT_MEMORY": "maybe"})
