"""A temporary directory removed because the job is ending stays removed: a writer that is
still running (the main thread while the signal thread ends the job, a peer rank writing its
part file) fails instead of making it anew, which MPI_Abort would then leave behind."""
import os

import pytest

from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path, forget, make_temp_dir, remove_temporaries, track_temporary


def write_into(directory, name="part-00001.h5"):
    with atomic_path(os.path.join(directory, name)) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(b"x" * 1024)


def test_a_peers_temporary_directory_removed_under_a_writer_is_not_made_again(tmp_path):
    shared = make_temp_dir(tmp_path / "dataset")  # as rank 0 makes it; a peer tracks it on receipt
    forget(shared)
    track_temporary(shared)
    write_into(shared, "part-00000.h5")  # while it exists, writes go in
    os.rename(shared, shared + "-gone")  # the ending rank removed it (a rename keeps the evidence)
    with pytest.raises(InputError, match="cannot write"):
        write_into(shared)
    assert not os.path.exists(shared)
    forget(shared)


def test_what_the_ending_process_removed_is_not_made_again_by_its_own_writer(tmp_path):
    own = make_temp_dir(tmp_path / "dataset")
    assert own in remove_temporaries()  # the signal thread's cleanup
    with pytest.raises(InputError, match="cannot write"):
        write_into(own)  # the main thread's next part file
    assert not os.path.exists(own)


def test_other_outputs_still_get_their_directory(tmp_path):
    write_into(tmp_path / "new" / "deeper")  # not a temporary: made as before
    assert os.listdir(tmp_path / "new" / "deeper") == ["part-00001.h5"]
