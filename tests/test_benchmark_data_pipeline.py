"""benchmarks/data_pipeline.py on a handful of images: the interface benchmarks/bench.py imports."""
import pytest

from benchmarks.data_pipeline import format_table, measure_folder_vs_mindrecord


@pytest.mark.timeout(300)
def test_folder_and_mindrecord_throughput_of_the_same_jpegs(tmp_path):
    result = measure_folder_vs_mindrecord(num_images=16, workers=2, rounds=1, epochs=1, batch_size=8,
                                          workdir=str(tmp_path))
    assert result["folder_img_s"] > 0 and result["mindrecord_img_s"] > 0
    assert len(result["folder_epochs_img_s"]) == len(result["mindrecord_epochs_img_s"]) == 1
    assert 90 < result["mean_jpeg_kb"] < 130  # near ImageNet's average JPEG
    assert (tmp_path / "mindrecord" / "train.mindrecord").is_file()
    assert "MindRecord / folder" in format_table(result)
