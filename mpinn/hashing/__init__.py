"""Categorical columns to CSR input columns: k-way split xxh64, the hashing trick or exact one-hot.

    tokens      each distinct value of a column once, as the text it is hashed as (factorize)
    columns     tokens to input columns: digests, split slices, onehot vocabularies
    contract    the settings a model depends on: made, fitted from data, checked, described
    spec        HashSpec: what the readers hash with (the options a contract is made with, or the contract)
    encode      columns to CSR under a contract
    collisions  how many values share their whole code, against the birthday bound
"""
from mpinn.hashing.collisions import collision_report, expected_colliding, format_report  # noqa: F401
from mpinn.hashing.columns import (default_buckets, feature_seed, feature_table, split_slices,  # noqa: F401
                                   token_columns)
from mpinn.hashing.contract import (HASHING_VERSION, MAX_BITS, MAX_COLUMNS, MAX_K, MODES,  # noqa: F401
                                    ContractFitter, auto_bits, check_contract, contract_problem, describe,
                                    fit_contract, make_contract, max_buckets, parse_buckets)
from mpinn.hashing.encode import csr_from_indices, encode, encode_indices, hashed_csr, per_feature_nnz  # noqa: F401
from mpinn.hashing.spec import HashSpec  # noqa: F401
from mpinn.hashing.tokens import MISSING, arrow_available, factorize  # noqa: F401
