import json
import os
import subprocess
import sys

import pytest

from qpr.errors import QPRError
from qpr.model.text import PAPER_TEXT, TextConfig, Vocabulary, stable_bucket, tokenize, words


def test_tokenize_lowercases_and_splits_punctuation():
    assert tokenize("What's UP, doc?!") == ["what", "'", "s", "up", ",", "doc", "?", "!"]


def test_tokenize_handles_any_script_and_emoji():
    assert tokenize("Ça va 🙂 مرحبا") == ["ça", "va", "🙂", "مرحبا"]


def test_words_drop_punctuation():
    assert words("what's up?") == ["what", "s", "up"]


def test_stable_bucket_is_the_same_in_processes_with_different_hash_seeds():
    code = "from qpr.model.text import stable_bucket; print(stable_bucket('zyzzyva', 5000))"
    seen = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        seen.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert seen == {f"{stable_bucket('zyzzyva', 5000)}\n"}


def test_vocabulary_keeps_most_frequent_and_hashes_the_rest():
    vocab = Vocabulary.build(["a a a b b c", "a b d"], TextConfig(vocab_size=2, hash_bins=7, subword_ngrams=0))
    assert vocab.tokens == ["a", "b"]
    assert vocab.encode("a b") == [1, 2]
    rare, unseen = vocab.token_id("c"), vocab.token_id("never-seen")
    for token_id in (rare, unseen):
        assert 3 <= token_id < 3 + 7 == vocab.size
    assert vocab.token_id("never-seen") == unseen  # stable


def test_min_count_sends_rare_training_words_to_the_hash_bins():
    vocab = Vocabulary.build(["a a a b b c", "a b d"], TextConfig(min_count=2, hash_bins=7))
    assert vocab.tokens == ["a", "b"]
    assert vocab.token_id("c") >= 3
    with pytest.raises(QPRError, match="min_count"):
        TextConfig(min_count=0)


def test_encode_truncates_and_refuses_empty_text():
    vocab = Vocabulary.build(["x y z"], TextConfig(max_len=2))
    assert len(vocab.encode("x y z x y")) == 2
    with pytest.raises(QPRError, match="empty"):
        vocab.encode("   ")
    with pytest.raises(QPRError, match="string"):
        vocab.encode(None)


def test_vocabulary_round_trips(tmp_path):
    vocab = Vocabulary.build(["how do i cook rice", "how do i boil eggs"], TextConfig(vocab_size=3, hash_bins=11))
    vocab.save(tmp_path / "v.json")
    loaded = Vocabulary.load(tmp_path / "v.json")
    assert loaded.tokens == vocab.tokens and loaded.config == vocab.config
    assert loaded.encode("how to fry rice") == vocab.encode("how to fry rice")


def test_loading_a_malformed_vocabulary_says_so(tmp_path):
    (tmp_path / "v.json").write_text("{not json")
    with pytest.raises(QPRError, match="cannot read vocabulary"):
        Vocabulary.load(tmp_path / "v.json")


def test_trigrams_are_the_default_and_add_ngram_bins_after_each_token_id():
    texts = ["how do i learn python", "what is python"]
    assert Vocabulary.build(texts, PAPER_TEXT).encode("learn python") == [6, 1]  # flat ids, one per token
    assert Vocabulary.build(texts).encode("learn python")[1][0] == 1  # the word's id first, then its trigrams
    assert TextConfig().subword_ngrams == 3
    vocab = Vocabulary.build(texts, TextConfig(subword_ngrams=3, hash_bins=1_000_003))
    ids = vocab.encode("learn pythn")
    assert [token[0] for token in ids] == [vocab.token_id("learn"), vocab.token_id("pythn")]
    assert ids[1][1:] == vocab.subword_ids("pythn") and len(ids[1]) == 1 + len("<pythn>") - 2
    # A typo keeps most of the word's n-grams: '<py', 'pyt', 'yth' of 'python' are in 'pythn'.
    assert len(set(vocab.subword_ids("pythn")) & set(vocab.subword_ids("python"))) == 3


def test_an_ngram_never_shares_the_bin_of_the_word_spelt_the_same():
    vocab = Vocabulary.build(["x"], TextConfig(subword_ngrams=3, hash_bins=1_000_003))
    # 'cat' is both an unseen word and the middle trigram of '<cat>'.
    assert vocab.subword_ids("cat")[1] != vocab.token_id("cat")


def test_subword_settings_are_checked_and_survive_save_and_load(tmp_path):
    with pytest.raises(QPRError, match="subword_ngrams"):
        TextConfig(subword_ngrams=-1)
    vocab = Vocabulary.build(["how do i learn python"], TextConfig(subword_ngrams=3, max_ngrams=4))
    vocab.save(tmp_path / "vocab.json")
    loaded = Vocabulary.load(tmp_path / "vocab.json")
    assert loaded.config == vocab.config
    assert loaded.encode("internationalization") == vocab.encode("internationalization")
    assert len(loaded.encode("internationalization")[0]) == 1 + 4


def test_a_vocabulary_saved_before_subwords_existed_loads_without_them(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps({"config": {"vocab_size": 10, "hash_bins": 5, "max_len": 64, "min_count": 1},
                                                    "tokens": ["how", "python"]}))
    assert Vocabulary.load(tmp_path / "old.json").encode("how python") == [1, 2]


def test_encoded_subword_lists_are_fresh_even_though_words_are_remembered():
    vocab = Vocabulary.build(["how do i learn python"])
    first = vocab.encode("python python")
    first[0].append(-1)
    assert vocab.encode("python")[0] == first[1] and -1 not in vocab.encode("python")[0]
