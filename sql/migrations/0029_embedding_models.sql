-- Which embedding model made each vector: the model's id (`sha256:<hex>` of the ONNX file the
-- server loaded; see catalog/search/embedder.py), written with the vector by the embedding
-- worker. `catalog reindex --embeddings` re-embeds the rows another model made (and those without
-- a vector); an import (catalog/backup) keeps an archived vector only when the importing server's
-- model made it. NULL: made before this column existed, by a model no longer known.
ALTER TABLE entries ADD COLUMN IF NOT EXISTS embedding_model text;
ALTER TABLE transcript_items ADD COLUMN IF NOT EXISTS embedding_model text;
