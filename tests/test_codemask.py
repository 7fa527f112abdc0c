"""``mask_code``: a secret literal is masked alone, never a name, an operator or a call; what a
mask would hide code with is a one-line problem (core/codemask.py)."""

from __future__ import annotations

import hashlib

import pytest

from chaz_nb.core.codemask import MARK, code_summary, mask_code

EXEC = "print(chr(82)+chr(65))"


@pytest.fixture(autouse=True)
def kernel_secret(monkeypatch):
    monkeypatch.setenv("SHOP_PASSWORD", "hunter2secretvalue9")


@pytest.mark.parametrize("code, shown", [
    ("api_key=0;" + EXEC, f"api_key={MARK};" + EXEC),
    ("token = '0' ;" + EXEC, f"token = {MARK} ;" + EXEC),
    ("password=\"pw\"\n" + EXEC, f"password={MARK}\n" + EXEC),
    ("secret=0x1F;" + EXEC, f"secret={MARK};" + EXEC),
    ("authorization='Basic x';" + EXEC, f"authorization={MARK};" + EXEC),
    ("h = {'X-Api-Key': 'k', 'n': 1};" + EXEC, f"h = {{'X-Api-Key': {MARK}, 'n': 1}};" + EXEC),
    ("h = {\"Authorization\": \"Bearer abcdefghijklmnopqr\"}; " + EXEC, f"h = {{\"Authorization\": {MARK}}}; " + EXEC),
    ("f(api_key='a', b=2);" + EXEC, f"f(api_key={MARK}, b=2);" + EXEC),
    ("password = 'a' 'b'  # password=c\n" + EXEC, f"password = {MARK} {MARK}  # password=c\n" + EXEC),
    ("k = 'sk-abcdefghijklmnopqrstuv'; " + EXEC, f"k = {MARK}; " + EXEC),
    ("k = 'hunter2secretvalue9'; " + EXEC, f"k = {MARK}; " + EXEC),
    ("x = 1  # Authorization: Bearer abcdefghijklmnopqrst\n" + EXEC,
     "x = 1  # Authorization: Bearer [REDACTED]\n" + EXEC),
    ("t = os.environ['SHOP_PASSWORD']; " + EXEC, "t = os.environ['SHOP_PASSWORD']; " + EXEC),
    ("x-api-key: 0\n" + EXEC, "x-api-key: 0\n" + EXEC),
    ("X-Api-Key: 0;" + EXEC, "X-Api-Key: 0;" + EXEC),
    ("Bearer = 0;" + EXEC, "Bearer = 0;" + EXEC),
])
def test_only_the_secret_literal_is_masked(code, shown):
    masked = mask_code(code)
    # masked alone; and each is a literal the model chose and no secret the kernel holds: the
    # person cannot see it, so it may not run as shown (it could be code a decoder runs)
    assert masked.text == shown
    if not masked.masked or "'hunter2secretvalue9'" in code:  # (that one is the kernel's secret)
        assert masked.problem is None
    else:
        assert "a literal you cannot see" in str(masked.problem)
    assert masked.sha256 == hashlib.sha256(code.encode()).hexdigest()


@pytest.mark.parametrize("code, why", [
    ("hunter2secretvalue9 = 1", "outside a string literal"),
    ("x = sk-abcdefghijklmnopqrstuvw", "outside a string literal"),
    ("x = f'sk-abcdefghijklmnopqrstuv{y}'", "f-string"),
    ("s = 'api_key=1;" + EXEC + "'; exec(s)", "exec or eval"),
    ("s = '''\napi_key=1\n'''", "exec or eval"),
    ("!curl -H 'X-Api-Key: abc' x", "does not read as Python"),
])
def test_what_a_mask_would_hide_code_with_is_a_one_line_problem_and_no_secret_is_shown(code, why):
    masked = mask_code(code)
    assert masked.problem is not None and "\n" not in masked.problem
    assert why in masked.problem or "a literal you cannot see" in masked.problem, masked.problem
    assert "hunter2secretvalue9" not in masked.text and "abcdefghijklmnopqrstuv" not in masked.text


def test_code_with_nothing_secret_is_unchanged_even_when_it_does_not_tokenize():
    for code in ("!ls -la", "x = (1,", "print('ok')", "", "%time x = 1"):
        assert mask_code(code).text == code and mask_code(code).problem is None


def test_the_summary_names_the_code_by_its_hash():
    assert code_summary("a = 1\nb = 2") == (
        f"code: 2 lines, 11 characters, sha256 {hashlib.sha256(b'a = 1' + bytes([10]) + b'b = 2').hexdigest()[:12]}")


@pytest.mark.parametrize("code, shown", [
    ("headers['X-Api-Key'] = 'abc'; " + EXEC, f"headers['X-Api-Key'] = {MARK}; " + EXEC),
    ("os.environ['SHOP_TOKEN'] = 'abc'\n" + EXEC, f"os.environ['SHOP_TOKEN'] = {MARK}\n" + EXEC),
    ("self.api_key: str = 'abc'; " + EXEC, f"self.api_key: str = {MARK}; " + EXEC),
])
def test_a_subscript_or_attribute_named_like_a_key_masks_its_value(code, shown):
    assert mask_code(code).text == shown


def test_code_masked_once_reads_the_same_when_masked_again():
    """A decision keeps the card's code as shown: masking it again hides nothing more."""
    once = mask_code("api_key=0;" + EXEC + "\npassword = 'x'  # api_key=1;" + EXEC)
    twice = mask_code(once.text)
    assert twice.text == once.text and twice.problem is None


@pytest.mark.parametrize("code", [
    "token = 'x' + 'import os\\x3bos.system\\x28\"id\"\\x29'\nexec(token)",
    "api_key = '696d706f7274206f73'\nexec(bytes.fromhex(api_key))",
    "password = 'aW1wb3J0IG9z'; import base64; eval(base64.b64decode(password))",
    "import subprocess\nsubprocess.run(['curl', '-H', 'Authorization: Bearer abcdefghijklmnopqrstu', 'x'])",
    "token = 'os'; m = __import__(token)",
])
def test_a_masked_literal_in_code_that_runs_text_is_refused(code):
    masked = mask_code(code)
    assert masked.problem is not None, masked
    assert "runs text as code" in masked.problem or "a literal you cannot see" in masked.problem, masked


@pytest.mark.parametrize("name", ["my_secret_key", "db_password_2", "PRIVATE_KEY_PEM", "stripeApiKey"])
def test_a_name_that_holds_a_credential_word_masks_its_value(name):
    assert mask_code(f"{name} = 'abc'; print(1)").text == f"{name} = {MARK}; print(1)"
