"""Documents in, documents out: a file's text translated where it stands, everything else as it was. The entrance is
``documents.formats`` (the formats, and ``translate_document``); each other module reads and writes one family of
formats, or is a part they share."""
