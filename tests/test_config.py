"""Settings come from sentient.yaml, and environment variables override them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sentient.config import NoVaultHere, Settings, load_settings, vault_root
from sentient.errors import ConfigError


def test_defaults_with_an_empty_config_file(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("")
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



def test_settings_handed_to_a_task_runs_process_are_the_same_settings(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("model: ollama_chat/qwen3:8b\ntimezone: Europe/Berlin\n"
                                            "tasks:\n  timeout: 30\nfacts:\n  every_n_turns: 2\n"
                                            "models:\n  helper:\n    api_base: http://h/v1\n")
    settings = load_settings(tmp_path, {"SENTIENT_MODEL": "openai/gpt-4o-mini"})
    again = Settings.handed_over(json.loads(json.dumps(settings.handed_down())))
    assert again == settings
    assert again.model_fix("chat") == settings.model_fix("chat")  # names SENTIENT_MODEL, as here
    assert "SENTIENT_MODEL" in again.model_fix("chat")


def test_sentient_vault_names_the_vault(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("")
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
        ("modle: local\n", "unknown setting 'modle' in sentient.yaml; did you mean 'model'?"),
        ("chat:\n  contxt_tokens: 9000\n", "unknown setting 'chat.contxt_tokens' in sentient.yaml; "
                                          "did you mean 'chat.context_tokens'?"),
        ("models:\n  chat:\n    api_key: sk-123\n", "models.chat.api_key: a key is never written in sentient.yaml"),
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
    (tmp_path / "sentient.yaml").write_text("")
    with pytest.raises(ConfigError, match="SENTIENT_MEMORY"):
        load_settings(tmp_path, {"SENTIENT_MEMORY": "maybe"})


def test_a_key_in_the_file_points_to_api_key_env(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("models:\n  helper:\n    api_key: sk-123\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path, {})
    assert "models.helper.api_key_env" in caught.value.message
    assert "sk-123" not in caught.value.message
    assert "Extra inputs" not in caught.value.message


def test_a_folder_without_sentient_yaml_is_not_a_vault(tmp_path: Path) -> None:
    expected = f"{tmp_path} is not a Sentient vault (no sentient.yaml); run `sentient init {tmp_path}`"
    for vault, environ in ((tmp_path, {}), (None, {"SENTIENT_VAULT": str(tmp_path)})):
        with pytest.raises(ConfigError) as caught:
            load_settings(vault, environ)
        assert caught.value.message == expected
    with pytest.raises(NoVaultHere) as caught:
        vault_root(None, {}, cwd=tmp_path)
    assert caught.value.message == expected
    assert list(tmp_path.iterdir()) == []  # nothing was made there


def test_the_vault_is_the_nearest_folder_upwards_with_sentient_yaml(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("")
    inner = tmp_path / "memory" / "family"
    inner.mkdir(parents=True)
    assert vault_root(None, {}, cwd=inner) == tmp_path.resolve()
    with pytest.raises(ConfigError, match=f"inside the vault {tmp_path}: use --vault {tmp_path}"):
        load_settings(inner, {})  # named explicitly, a folder inside a vault is not that vault


def test_a_file_is_not_a_vault_folder(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("")
    note = tmp_path / "tea.md"
    note.write_text("# Tea\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(note, {})
    assert caught.value.message == (f"{note} is a file, not a vault folder; the vault holding it is {tmp_path}: "
                                    f"use --vault {tmp_path}")


def test_the_fix_for_a_model_names_where_the_model_came_from(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("model: local\nmodels:\n  extraction:\n    model: openai/x\n")
    assert load_settings(tmp_path, {}).model_fix("chat") == "set model: in sentient.yaml"
    from_env = load_settings(tmp_path, {"SENTIENT_MODEL": "openai/y", "SENTIENT_HELPER_MODEL": "openai/z"})
    assert from_env.model_fix("chat") == "change SENTIENT_MODEL (it overrides model: in sentient.yaml)"
    assert from_env.model_fix("helper") == (
        "change SENTIENT_HELPER_MODEL (it overrides models.helper.model in sentient.yaml)"
    )
    assert from_env.model_fix("extraction") == "set models.extraction.model in sentient.yaml"


CHAT_ONLY = ("models:\n  chat:\n    model: openai/fake\n    api_base: http://127.0.0.1:18999/v1\n"
             "    api_key_env: FAKE_KEY\n    timeout: 30\n")


def test_a_role_left_unset_uses_all_of_chats_settings(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text(CHAT_ONLY)
    settings = load_settings(tmp_path, {})
    for name in ("helper", "extraction"):
        role = settings.role(name)
        assert (role.model, role.api_base, role.api_key_env, role.timeout) == (
            "openai/fake", "http://127.0.0.1:18999/v1", "FAKE_KEY", 30)
        assert settings.role_setting(name, "api_key_env") == "models.chat.api_key_env"
        assert settings.model_fix(name) == "set models.chat.model in sentient.yaml"


def test_a_role_that_names_a_model_uses_only_its_own_settings(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text(CHAT_ONLY + "  helper:\n    model: ollama_chat/qwen3:8b\n")
    settings = load_settings(tmp_path, {})
    helper = settings.role("helper")
    assert (helper.model, helper.api_base, helper.api_key_env, helper.timeout) == (
        "ollama_chat/qwen3:8b", None, None, None)
    assert settings.model_fix("helper") == "set models.helper.model in sentient.yaml"
    assert settings.role("extraction").api_base == "http://127.0.0.1:18999/v1"  # still as chat


def test_a_role_without_a_model_keeps_the_fields_it_sets_over_chats(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text(CHAT_ONLY + "  extraction:\n    timeout: 600\n")
    extraction = load_settings(tmp_path, {}).role("extraction")
    assert (extraction.model, extraction.api_key_env, extraction.timeout) == ("openai/fake", "FAKE_KEY", 600)


def test_sentient_helper_model_gives_the_helper_a_model_and_settings_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text(CHAT_ONLY)
    helper = load_settings(tmp_path, {"SENTIENT_HELPER_MODEL": "openai/other"}).role("helper")
    assert (helper.model, helper.api_base, helper.api_key_env) == ("openai/other", None, None)


def test_sentient_model_overrides_the_models_the_file_gives_each_role(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text(
        "model: local\nmodels:\n  chat:\n    model: openai/x\n    api_base: http://127.0.0.1:9/v1\n"
        "  helper:\n    model: openai/small\n  extraction:\n    model: openai/y\n")
    settings = load_settings(tmp_path, {"SENTIENT_MODEL": "scripted/test"})
    assert [settings.role(r).model for r in ("chat", "helper", "extraction")] == ["scripted/test"] * 3
    assert settings.role("chat").api_base == "http://127.0.0.1:9/v1"  # the rest of the file's settings stay
    both = load_settings(tmp_path, {"SENTIENT_MODEL": "scripted/test", "SENTIENT_HELPER_MODEL": "scripted/h"})
    assert [both.role(r).model for r in ("chat", "helper", "extraction")] == ["scripted/test", "scripted/h",
                                                                              "scripted/test"]


def test_the_budget_of_a_send_fits_the_embedded_models_window() -> None:
    assert Settings(model="openai/gpt-4o").context_budget == 6000
    local = Settings(model="local")
    assert (local.context_budget, local.knowledge_chars, local.result_chars, local.reading_chars) == (
        2048, 4096, 2048, 8192)
    assert Settings(model="local:/models/x.gguf", local={"context": 32768}).context_budget == 6000
    assert Settings(model="local", models={"chat": {"model": "openai/gpt-4o"}}).context_budget == 6000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("api:\n  port: 70000\n", "api.port: Input should be less than or equal to 65535"),
        ("tasks:\n  timeout: 0\n", "tasks.timeout: Input should be greater than 0"),
        ("chat:\n  context_tokens: 10\n", "chat.context_tokens: Input should be greater than or equal to 200"),
        ("features:\n  memory: maybe\n", "features.memory: Input should be a valid boolean"),
        ("model: [a, b]\n", "model: Input should be a valid string"),
        ("scripts:\n  sandbox: docker\n", "scripts.sandbox: Input should be 'auto', 'bwrap' or 'none'"),
        ("facts:\n  evry_n_turns: 3\n", "unknown setting 'facts.evry_n_turns' in sentient.yaml; "
                                        "did you mean 'facts.every_n_turns'?"),
        ("timezone: Europe/Berln\n", "timezone: 'Europe/Berln' is not a known time zone"),
        ("api: 5\n", "api: Input should be a valid dictionary"),
    ],
)
def test_each_refused_value_is_named_with_what_it_should_be(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "sentient.yaml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path, {})
    assert message in caught.value.message


def test_every_problem_of_a_file_is_named_at_once(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("api:\n  port: high\n  hots: x\ntasks:\n  max_parallel: 0\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path, {})
    for part in ("api.port: Input should be a valid integer", "unknown setting 'api.hots'",
                 "tasks.max_parallel: Input should be greater than or equal to 1"):
        assert part in caught.value.message


def test_values_yaml_gives_as_text_are_read_as_the_setting_means(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("api:\n  port: '9000'\n  allow_memory: 'yes'\ntasks:\n  timeout: 30\n"
                                            "threats:\n  patterns: []\n")
    settings = load_settings(tmp_path, {})
    assert (settings.api.port, settings.api.allow_memory, settings.tasks.timeout) == (9000, True, 30.0)
    assert isinstance(settings.tasks.timeout, float) and isinstance(settings.vault, Path)


def test_settings_are_frozen_and_a_copy_keeps_where_the_model_came_from(tmp_path: Path) -> None:
    (tmp_path / "sentient.yaml").write_text("")
    settings = load_settings(tmp_path, {"SENTIENT_MODEL": "openai/gpt-4o-mini"})
    with pytest.raises(AttributeError):
        settings.model = "other"  # type: ignore[misc]
    copied = settings.model_copy(update={"api": {"port": 9001}})
    assert copied.api.port == 9001 and settings.api.port == 8765
    assert "SENTIENT_MODEL" in copied.model_fix("chat")
    with pytest.raises(ValueError, match="api.port"):
        settings.model_copy(update={"api": {"port": -1}})


def test_a_list_setting_is_never_shared_between_two_settings() -> None:
    first, second = Settings(), Settings()
    first.threats.patterns.append({"id": "x"})
    assert second.threats.patterns == []
