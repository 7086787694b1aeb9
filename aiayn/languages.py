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


def canonical(code: str) -> str:
    """A language code as the server compares it: lower case, aliases resolved."""
    code = code.strip().lower()
    return ALIASES.get(code, code)


def language_name(code: str) -> str:
    return NAMES.get(code, code)
