"""Brown corpus POS tags -> a coarse 12-tag set (the "universal" tags of Petrov, Das and
McDonald 2012, "A Universal Part-of-Speech Tagset"), for the POS tagging task.

    coarse_tag("nn-tl")  -> 'NOUN'      coarse_tag("vbd-hl") -> 'VERB'
    coarse_tag("dod*")   -> 'VERB'      coarse_tag("*")      -> 'ADV'   ("not", "n't")
    coarse_tag("ppss+md") -> 'PRON'     coarse_tag("fw-nn")  -> 'X'

Why coarse: the Brown tag set has 87 simple tags, but with its suffixes, prefixes and
contractions the corpus uses 470 distinct strings, many seen a handful of times; the 12 tags
are what cross-corpus POS results are usually reported on, and every one of them is frequent.

How a Brown tag string is reduced, in this order:
  1. suffixes '-tl' (word in a title), '-hl' (in a headline) and '-nc' (cited word) are stripped,
     repeatedly ('nn-tl-hl' -> 'nn'); they mark where a word occurs, not what it is;
  2. a 'fw-' prefix (foreign word, 'fw-nn', 'fw-in+at') makes the tag X: the English tag after
     it says what the word does in its own language;
  3. a contraction 'a+b' ("I'll" ppss+md, "there's" ex+bez, "gonna" vbg+to) takes its FIRST
     part: one label per word, and the word begins as the first part;
  4. '*' is Brown's negation mark: alone ('*': "not", "n't") it is ADV; appended to a verb tag
     ('dod*' "didn't", 'md*' "can't", 'bez*' "isn't") it is dropped, so negated verbs are VERB;
  5. a trailing '$' (possessive: 'nn$', 'pp$', 'pp$$' "mine", 'wp$' "whose") is dropped;
  6. the base tag is looked up in `BROWN_TO_COARSE` (below); a tag not there raises DataError.
Choices where tag sets differ: 'cs' (subordinating conjunction: that, if, because) -> ADP, as
PTB's IN, which covers both; 'ex' (existential "there") -> DET as Petrov et al. map it; 'ap'
(post-determiner: many, next), 'abn' (all, half), 'abx' (both), 'abl' (such, quite) -> DET;
'od' (ordinal) -> ADJ; 'nr' (adverbial noun: home, today) -> NOUN; 'uh' (interjection) -> X;
'nil' (no tag) -> X; every punctuation tag -> '.'.
"""

from __future__ import annotations

from data.errors import DataError

COARSE_TAGS = ("ADJ", "ADP", "ADV", "CONJ", "DET", "NOUN", "NUM", "PRON", "PRT", "VERB", ".",
               "X")

_GROUPS = {
    "NOUN": "nn nns np nps nr nrs",
    "VERB": ("vb vbd vbg vbn vbz md be bed bedz beg bem ben ber bez do dod doz hv hvd hvg hvn "
             "hvz"),
    "ADJ": "jj jjr jjs jjt od",
    "ADV": "rb rbr rbt rn ql qlp wrb wql *",
    "PRON": "pn pp ppl ppls ppo pps ppss wp wpo wps",
    "DET": "at ap abn abl abx dt dti dts dtx wdt ex",
    "ADP": "in cs",
    "NUM": "cd",
    "CONJ": "cc",
    "PRT": "to rp",
    ".": ". , : ; ( ) `` '' ' -- ? !",
    "X": "uh nil fw",
}
BROWN_TO_COARSE: dict[str, str] = {tag: coarse for coarse, tags in _GROUPS.items()
                                   for tag in tags.split()}
_SUFFIXES = ("-tl", "-hl", "-nc")


def base_tag(tag: str) -> str:
    """Steps 1-5 of the module docstring: the simple Brown tag a full tag string stands for
    ('fw' for every foreign word)."""
    tag = tag.lower()
    stripped = True
    while stripped:
        stripped = False
        for suffix in _SUFFIXES:
            if tag.endswith(suffix) and len(tag) > len(suffix):
                tag, stripped = tag[: -len(suffix)], True
    if tag.startswith("fw-"):
        return "fw"
    tag = tag.split("+", 1)[0] or tag
    if tag != "*":
        tag = tag.rstrip("*") or tag
    if tag not in ("$",) and tag.endswith("$"):
        tag = tag.rstrip("$") or tag
    return tag


def coarse_tag(tag: str) -> str:
    """The coarse tag (one of COARSE_TAGS) of a Brown tag string, by the module docstring."""
    base = base_tag(tag)
    if base not in BROWN_TO_COARSE:
        raise DataError(f"Brown tag {tag!r} (base {base!r}) has no coarse tag; known bases: "
                        f"{sorted(BROWN_TO_COARSE)}")
    return BROWN_TO_COARSE[base]
