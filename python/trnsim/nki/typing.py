"""nki.typing: the annotations NKI kernels write (`t: tensor[128, 512] = nl.load(...)`); they
document shapes and are not checked."""


class _TensorAnnotation:
    def __getitem__(self, shape):
        return self

    def __repr__(self) -> str:
        return "nki.typing.tensor"


tensor = _TensorAnnotation()
