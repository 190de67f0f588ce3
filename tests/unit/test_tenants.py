from mtad.spool import tenants


def test_password_hash_round_trip() -> None:
    encoded = tenants.hash_password("s3cret")
    assert encoded.startswith("scrypt$16384$8$1$")
    assert "s3cret" not in encoded
    assert tenants.verify_password("s3cret", encoded)
    assert not tenants.verify_password("s3cret!", encoded)
    assert tenants.hash_password("s3cret") != encoded  # salted


def test_verify_refuses_malformed_hashes() -> None:
    assert not tenants.verify_password("x", "")
    assert not tenants.verify_password("x", "bcrypt$1$2$3$4$5")
    assert not tenants.verify_password("x", "scrypt$a$b$c$d$e")
