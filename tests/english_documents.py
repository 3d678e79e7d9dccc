"""Documents of English text for the WordPiece and pretraining-data tests: sentences put
together from fixed subjects, verbs, objects and endings, seeded, so every test sees the same
corpus (test_pretraining_data.py, test_pretraining_epochs.py, test_wordpiece.py)."""

from __future__ import annotations

import random

from data.corpora.documents import Document

_SUBJECTS = [
    "The old farmer", "Her younger brother", "The committee", "A tired soldier",
    "The captain of the ship", "Mrs. Bennet", "The president", "Our neighbour",
    "The schoolteacher", "A young lawyer from Philadelphia", "The governor", "My grandmother",
    "The engineer", "Several witnesses", "The mayor's wife", "Elizabeth", "The congregation",
    "A stranger from Boston", "The editor of the Gazette", "Mr. Darcy", "Colonel Brandon",
    "The Secretary of the Treasury", "Nobody in the village", "The eldest daughter"]
_VERBS = [
    "walked slowly toward", "wrote a long letter about", "refused to speak of",
    "spoke warmly about", "carefully examined", "could not forget", "laughed at",
    "argued bitterly over", "quietly admired", "never understood", "returned at once to",
    "had long suspected", "was delighted by", "complained loudly about", "described in detail",
    "recommended to Congress", "was astonished by", "hurried past", "painted a picture of"]
_OBJECTS = [
    "the abandoned mill", "the new railway", "the treaty with Spain",
    "the evening's entertainment", "the price of cotton", "the unfinished bridge",
    "her sister's engagement", "the federal budget", "the harvest",
    "the little church on the hill", "the letters from London", "the war in the West",
    "the broken carriage", "the annual ball", "the governor's proposal", "the tariff question",
    "the deserted schoolhouse", "an extraordinary inheritance", "the neighbouring estate"]
_ENDINGS = [
    "before the sun went down", "in the spring of {year}", "despite the heavy rain",
    "while the others waited outside", "without saying a word to anyone",
    "as the clock struck {hour}", "after dinner", "for nearly {n} hours",
    "during the long winter of {year}", "with considerable enthusiasm", "{n} miles from town",
    "", "", ""]
_OPENERS = ["", "", "", "", "However, ", "In truth, ", "Meanwhile, ", "Unfortunately, ",
            "On Tuesday, ", "Naturally, "]


def _sentence(rng: random.Random) -> str:
    ending = rng.choice(_ENDINGS).format(year=rng.randint(1790, 1899), n=rng.randint(2, 60),
                                         hour=rng.choice(["nine", "ten", "eleven", "noon"]))
    opener = rng.choice(_OPENERS)
    subject = rng.choice(_SUBJECTS)
    if opener and subject.startswith(("The", "A ", "Her", "My", "Our")):
        subject = subject[0].lower() + subject[1:]
    text = f"{opener}{subject} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
    return text + (f" {ending}." if ending else ".")


def make_documents(num_docs: int, seed: int, *, paragraphs=(2, 4), sentences=(3, 8),
                   prefix: str = "doc") -> list[Document]:
    rng = random.Random(seed)
    return [Document(f"{prefix}{d:03d}",
                     [[_sentence(rng) for _ in range(rng.randint(*sentences))]
                      for _ in range(rng.randint(*paragraphs))], {"year": 1800 + d})
            for d in range(num_docs)]


DOCS = make_documents(150, seed=0)      # 2,551 sentences, 65,000 word pieces
VOCAB_SIZE = 400                        # small: 39% of the pieces are "##" continuations
