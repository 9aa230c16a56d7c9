"""MagicBatch (DataCom 2022): the evaluation."""
