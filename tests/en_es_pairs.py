"""English / Spanish sentence pairs written for the SentencePiece and translation-pipeline tests
(test_sentencepiece_vocab.py, test_text_pipeline.py), and examples shaped like the bible_en_es
source."""

from __future__ import annotations

PAIRS = [
    ("Where is the train station?", "¿Dónde está la estación de tren?"),
    ("I would like a cup of coffee, please.", "Quisiera una taza de café, por favor."),
    ("The children are playing in the garden.", "Los niños están jugando en el jardín."),
    ("My sister lives in a small town near the sea.",
     "Mi hermana vive en un pueblo pequeño cerca del mar."),
    ("We have to leave before it gets dark.", "Tenemos que salir antes de que oscurezca."),
    ("The book is on the table.", "El libro está sobre la mesa."),
    ("Can you help me carry these boxes?", "¿Puedes ayudarme a llevar estas cajas?"),
    ("It rained all night and the streets are wet.",
     "Llovió toda la noche y las calles están mojadas."),
    ("He forgot his keys at the office.", "Olvidó sus llaves en la oficina."),
    ("The museum opens at nine in the morning.", "El museo abre a las nueve de la mañana."),
    ("She is reading a letter from her grandmother.", "Ella está leyendo una carta de su abuela."),
    ("How much does this shirt cost?", "¿Cuánto cuesta esta camisa?"),
    ("They bought fresh bread at the market.", "Compraron pan fresco en el mercado."),
    ("The doctor says that I need to rest.", "El médico dice que necesito descansar."),
    ("Our teacher explained the lesson again.", "Nuestro profesor explicó la lección otra vez."),
    ("The river crosses the whole valley.", "El río atraviesa todo el valle."),
    ("I do not understand what you are saying.", "No entiendo lo que estás diciendo."),
    ("The cat sleeps on the chair by the window.",
     "El gato duerme en la silla junto a la ventana."),
    ("We will travel to the mountains in summer.", "Viajaremos a las montañas en verano."),
    ("Please close the door when you leave.", "Por favor, cierra la puerta cuando salgas."),
    ("The soup is too hot to eat.", "La sopa está demasiado caliente para comerla."),
    ("My father works in a hospital.", "Mi padre trabaja en un hospital."),
    ("The bus arrives every twenty minutes.", "El autobús llega cada veinte minutos."),
    ("They were singing old songs together.", "Cantaban juntos canciones antiguas."),
    ("This road leads to the old castle.", "Este camino lleva al castillo viejo."),
    ("I lost my umbrella on the way home.", "Perdí mi paraguas de camino a casa."),
    ("The shop closes early on Sundays.", "La tienda cierra temprano los domingos."),
    ("Water boils at one hundred degrees.", "El agua hierve a cien grados."),
    ("She wrote her name on the first page.", "Escribió su nombre en la primera página."),
    ("The baby is sleeping, speak quietly.", "El bebé está durmiendo, habla en voz baja."),
    ("We ate fish and rice for dinner.", "Cenamos pescado con arroz."),
    ("Turn left at the next corner.", "Gira a la izquierda en la próxima esquina."),
    ("The garden is full of red flowers.", "El jardín está lleno de flores rojas."),
    ("He runs in the park every morning.", "Él corre en el parque todas las mañanas."),
    ("The meeting was moved to Thursday.", "La reunión se cambió al jueves."),
    ("I need a new pair of shoes.", "Necesito un par de zapatos nuevos."),
    ("The wind blew the leaves away.", "El viento se llevó las hojas."),
    ("Do you know where the library is?", "¿Sabes dónde está la biblioteca?"),
    ("Yes.", "Sí."),
    ("In the beginning the earth was without form, and the waters covered the land, and "
     "darkness was upon the face of the deep while the wind moved over the waters.",
     "En el principio la tierra estaba desordenada y vacía, y las aguas cubrían la tierra, y "
     "las tinieblas estaban sobre la faz del abismo mientras el viento se movía sobre las "
     "aguas."),
]
KEYS = ("en", "es")
VOCAB = 200


def make_examples(n=None, *, as_bytes=False):
    """Examples like the bible_en_es source: {'en', 'es', 'ref'}; bytes or str values."""
    pairs = PAIRS if n is None else [PAIRS[i % len(PAIRS)] for i in range(n)]
    enc = (lambda s: s.encode("utf-8")) if as_bytes else (lambda s: s)
    return [{"en": enc(en), "es": enc(es), "ref": enc(f"Test {i}:1")}
            for i, (en, es) in enumerate(pairs)]


def texts_fn():
    for en, es in PAIRS:
        yield en
        yield es
