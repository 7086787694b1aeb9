"""Language codes as aiayn's server and its packages name them: LibreTranslate's ISO 639-1 codes, lower case, with its
aliases (``zh-Hans`` is ``zh``, ``zh-Hant`` is ``zt``, ``pt-BR`` is ``pb``), and their English names.
"""

from __future__ import annotations

# English names of the languages LibreTranslate serves (its /languages answers with them), and a few more.
NAMES = {
    "ar": "Arabic", "az": "Azerbaijani", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish",
    "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay", "nb": "Norwegian",
    "nl": "Dutch", "pb": "Portuguese (Brazil)", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "th": "Thai",
    "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
    "zt": "Chinese (traditional)",
}
ALIASES = {"zh-hans": "zh", "zh-cn": "zh", "zh-hant": "zt", "zh-tw": "zt", "pt-br": "pb"}


# ISO 639-3 (and 639-2/B) codes as OPUS-MT's multilingual models name their targets (>>fra<<), to ISO 639-1
THREE = {
    "ara": "ar", "aze": "az", "bul": "bg", "ben": "bn", "cat": "ca", "ces": "cs", "cze": "cs", "dan": "da",
    "deu": "de", "ger": "de", "ell": "el", "gre": "el", "eng": "en", "epo": "eo", "spa": "es", "est": "et",
    "eus": "eu", "baq": "eu", "fas": "fa", "per": "fa", "fin": "fi", "fra": "fr", "fre": "fr", "gle": "ga",
    "glg": "gl", "heb": "he", "hin": "hi", "hun": "hu", "ind": "id", "ita": "it", "jpn": "ja", "kor": "ko",
    "lit": "lt", "lav": "lv", "msa": "ms", "may": "ms", "nob": "nb", "nld": "nl", "dut": "nl", "pol": "pl",
    "por": "pt", "ron": "ro", "rum": "ro", "rus": "ru", "slk": "sk", "slo": "sk", "slv": "sl", "sqi": "sq",
    "alb": "sq", "srp": "sr", "swe": "sv", "tha": "th", "tgl": "tl", "tur": "tr", "ukr": "uk", "urd": "ur",
    "vie": "vi", "zho": "zh", "chi": "zh", "cmn": "zh",
}


def from_tag_code(code: str) -> str:
    """A language code as a model's target tag spells it (``fra``, ``por_Latn``, ``pt_br``) as aiayn names it
    (``fr``, ``pt``, ``pb``): ISO 639-1 where known, else as it is."""
    base = code.split("_")[0].lower()
    return canonical(code.replace("_", "-")) if canonical(code.replace("_", "-")) in NAMES else THREE.get(base, base)


def canonical(code: str) -> str:
    """A language code as the server compares it: lower case, aliases resolved."""
    code = code.strip().lower()
    return ALIASES.get(code, code)


def language_name(code: str) -> str:
    return NAMES.get(code, code)
