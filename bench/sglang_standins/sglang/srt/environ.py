"""Stand-in for sglang.srt.environ (sglang 0.5.23): the two settings the symmetric-memory allocator
reads, with SGLang's defaults and parsing (an invalid value warns and gives the default)."""
import os
import warnings


class _Setting:
    def __init__(self, name, default, parse):
        self.name, self.default, self._parse = name, default, parse

    def get(self):
        value = os.getenv(self.name)
        if value is None:
            return self.default
        try:
            return self._parse(value)
        except ValueError as e:
            warnings.warn(f'Invalid value for {self.name}: {e}, using default "{self.default}"')
            return self.default

    def set(self, value):
        os.environ[self.name] = str(value)

    def clear(self):
        os.environ.pop(self.name, None)


def _bool(value):
    if value.lower() in ("true", "1", "yes", "y"):
        return True
    if value.lower() in ("false", "0", "no", "n"):
        return False
    raise ValueError(f'"{value}" is not a valid boolean value')


def _int(value):
    try:
        return int(value)
    except ValueError:
        raise ValueError(f'"{value}" is not a valid integer value') from None


class _Envs:
    SGLANG_DEBUG_SYMM_MEM = _Setting("SGLANG_DEBUG_SYMM_MEM", False, _bool)
    SGLANG_SYMM_MEM_PREALLOC_GB_SIZE = _Setting("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", -1, _int)


envs = _Envs()
