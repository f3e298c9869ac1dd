"""Stand-in for sglang.srt.distributed.utils (sglang 0.5.23): StatelessProcessGroup, which pynccl
accepts beside a torch process group: rank, world size and broadcast_obj over a torch.distributed
store (a TCPStore, say)."""
import pickle


class StatelessProcessGroup:
    def __init__(self, rank: int, world_size: int, store, prefix: str = "stateless"):
        self.rank, self.world_size, self.store, self.prefix = rank, world_size, store, prefix
        self._broadcasts = 0

    def broadcast_obj(self, obj, src: int):
        key = f"{self.prefix}/broadcast/{self._broadcasts}/{src}"
        self._broadcasts += 1
        if self.rank == src:
            self.store.set(key, pickle.dumps(obj))
            return obj
        return pickle.loads(self.store.get(key))
