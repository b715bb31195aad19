"""The Hugging Face user's own DeepSpeed switch reaching zoffload: zoffload.hf.TrainingArguments(deepspeed=...) (a
dict, a JSON file, JSON text, --deepspeed through HfArgumentParser) and `accelerate launch --use_deepspeed
--deepspeed_config_file` (its environment) run ZoffloadTrainer without the deepspeed package and without
accelerate's DeepSpeed plugin, training exactly as zoffload_config= does. Skipped without transformers or
accelerate."""
import base64
import json
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import zoffload.hf as zh  # noqa: E402
from hf_tokens import Tokens  # noqa: E402
from test_hf_trainer import Recorder, build, hf_config  # noqa: E402


def _args(tmp_path, steps=4, cls=None, **kw):
    base = dict(output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=2, learning_rate=2e-3,
                warmup_steps=1, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=3,
                disable_tqdm=True)
    base.update(kw)
    return (cls or zh.TrainingArguments)(**base)


def _train(a, **kw):
    t = Recorder(model=build(0, 2), args=a, train_dataset=Tokens(), **kw)
    t.train()
    return t


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Four steps with the config given as zoffload_config= and transformers' own TrainingArguments."""
    tmp = tmp_path_factory.mktemp("ref")
    t = _train(_args(tmp, cls=transformers.TrainingArguments), zoffload_config=hf_config(2, tmp))
    return t.losses, t.lrs


def _same_run(t, reference):
    assert t.zo_engine is not None and t.zo_engine.global_steps == 4
    assert getattr(t.accelerator.state, "deepspeed_plugin", None) is None
    assert not t.is_deepspeed_enabled
    assert (t.losses, t.lrs) == reference


def _taken_over(a, reference):
    """Train on @a, whose DeepSpeed settings ZoffloadTrainer must drop, clear the ACCELERATE_USE_DEEPSPEED that the
    caller or transformers left, and check the run is zoffload_config='s."""
    try:
        t = _train(a)
    finally:
        os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
    assert a.deepspeed is None and a.deepspeed_plugin is None
    _same_run(t, reference)
    return t


def test_deepspeed_dict_trains_as_zoffload_config(tmp_path, reference):
    a = _args(tmp_path, deepspeed=hf_config(2, tmp_path))
    assert a.deepspeed is None and a.zoffload_config["zero_optimization"]["stage"] == 2
    assert a.deepspeed_plugin is None and "ACCELERATE_USE_DEEPSPEED" not in os.environ
    _same_run(_train(a), reference)


def test_deepspeed_file_and_json_text(tmp_path, reference):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(hf_config(2, tmp_path)))
    a = _args(tmp_path, deepspeed=str(path))
    assert a.zoffload_config == str(path)  # kept as a path: errors name the file
    _same_run(_train(a), reference)
    text = json.dumps(hf_config(2, tmp_path))
    assert _args(tmp_path, deepspeed=text).zoffload_config == json.loads(text)
    b64 = base64.urlsafe_b64encode(text.encode()).decode()
    assert _args(tmp_path, deepspeed=b64).zoffload_config == json.loads(text)


def test_deepspeed_flag_through_hf_argument_parser(tmp_path, reference):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(hf_config(2, tmp_path)))
    (a,) = transformers.HfArgumentParser(zh.TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path / "out"), "--max_steps", "4", "--per_device_train_batch_size", "2",
         "--learning_rate", "2e-3", "--warmup_steps", "1", "--logging_steps", "1", "--save_strategy", "no",
         "--report_to", "none", "--use_cpu", "--seed", "3", "--disable_tqdm", "true", "--deepspeed", str(path)])
    assert a.zoffload_config == str(path)
    _same_run(_train(a), reference)


def test_accelerate_launch_use_deepspeed_environment(tmp_path, reference, monkeypatch):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(hf_config(2, tmp_path)))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # what accelerate launch --use_deepspeed sets
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(path))
    a = _args(tmp_path)
    assert a.zoffload_config == str(path)
    assert "ACCELERATE_USE_DEEPSPEED" not in os.environ  # the Trainer's Accelerator must not start DeepSpeed
    _same_run(_train(a), reference)


def test_accelerate_use_deepspeed_without_config_file_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", raising=False)
    with pytest.raises(ValueError, match="--deepspeed_config_file"):
        _args(tmp_path)


def test_repr_masks_tokens_as_transformers_does(tmp_path):
    """The subclass keeps transformers' repr, which prints a hub token as <HUB_TOKEN> (a @dataclass decorator on
    it made a new one that printed the token)."""
    a = _args(tmp_path, hub_token="hf_secret_token_123")
    assert "hf_secret_token_123" not in repr(a) and "<HUB_TOKEN>" in repr(a)
    assert "hf_secret_token_123" not in str(a)
    assert a.hub_token == "hf_secret_token_123"


def test_bad_deepspeed_value_named(tmp_path):
    with pytest.raises(ValueError, match=r"TrainingArguments.deepspeed='no-such-file.json': neither a JSON file"):
        _args(tmp_path, deepspeed="no-such-file.json")


def test_config_given_twice_refused(tmp_path):
    a = _args(tmp_path, deepspeed=hf_config(2, tmp_path))
    with pytest.raises(ValueError, match="given twice"):
        zh.ZoffloadTrainer(model=build(0, 2), args=a, train_dataset=Tokens(), zoffload_config=hf_config(2, tmp_path))


def test_no_config_at_all_refused(tmp_path):
    with pytest.raises(ValueError, match=r"TrainingArguments\(deepspeed=\.\.\.\)"):
        zh.ZoffloadTrainer(model=build(0, 2), args=_args(tmp_path), train_dataset=Tokens())


def test_transformers_arguments_with_deepspeed_taken_over(tmp_path, reference):
    """transformers' own TrainingArguments(deepspeed=...) as made where the deepspeed package is installed: the
    plugin, the HF DeepSpeed config and ACCELERATE_USE_DEEPSPEED it leaves are dropped (made here by setting the
    attributes a DeepSpeed-less transformers cannot make itself)."""
    a = _args(tmp_path, cls=transformers.TrainingArguments)
    a.deepspeed = hf_config(2, tmp_path)
    a.deepspeed_plugin = object()  # what accelerate's DeepSpeedPlugin would be: dropped, never used
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    t = _taken_over(a, reference)
    assert torch.isfinite(torch.tensor(t.losses)).all()


def test_transformers_arguments_made_by_deepspeed_taken_over(tmp_path, reference):
    """Where the deepspeed package is installed (the torch 2 venv): transformers' own TrainingArguments(deepspeed=)
    builds accelerate's DeepSpeedPlugin; ZoffloadTrainer drops it and trains on zoffload, as zoffload_config=."""
    try:
        import deepspeed  # noqa: F401
    except Exception as e:  # noqa: BLE001 (absent, or present but unable to start here)
        pytest.skip("the deepspeed package does not import here: %s" % e)
    a = _args(tmp_path, cls=transformers.TrainingArguments, deepspeed=hf_config(2, tmp_path))
    assert a.deepspeed_plugin is not None  # transformers made DeepSpeed's plugin
    _taken_over(a, reference)
