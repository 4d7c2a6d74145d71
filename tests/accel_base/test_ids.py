"""Request ids: the text of random version-4 UUIDs, as uuid.uuid4() gives."""

import uuid

from accel_base.ids import uuid4_text


def test_ids_are_version_4_uuids_in_canonical_text_and_differ():
    ids = [uuid4_text() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # lower-case hex, dashes where uuid puts them
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
