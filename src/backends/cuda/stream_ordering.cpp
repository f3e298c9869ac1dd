#include "stream_ordering.hpp"

namespace ncclpool::cuda {

namespace {
CUstream as_stream(stream_t s) { return reinterpret_cast<CUstream>(s); }
}  // namespace

CudaStreamOrdering::~CudaStreamOrdering() {
  const Driver& d = driver();
  for (auto& [stream, p] : producers_) d.cuEventDestroy_v2(p.event);
}

bool CudaStreamOrdering::capturing(stream_t stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(driver().cuStreamIsCapturing(as_stream(stream), &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Called before the pool changes anything, so a failure (e.g. a destroyed stream) leaves the block live.
bool CudaStreamOrdering::publish(stream_t stream) {
  const Driver& d = driver();
  ScopedContext scope(context_);  // stream 0 means the current context's default stream
  auto [it, inserted] = producers_.try_emplace(stream);
  Producer& p = it->second;
  if (inserted) {
    CUresult r = d.cuEventCreate(&p.event, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
      producers_.erase(it);
      check(r, "cuEventCreate");
    }
  }
  if (capturing(stream)) return false;
  check(d.cuEventRecord(p.event, as_stream(stream)), "cuEventRecord (publish frees of a stream)");
  p.recorded = true;
  return true;
}

bool CudaStreamOrdering::wait(stream_t consumer, stream_t producer) {
  auto it = producers_.find(producer);
  if (it == producers_.end() || !it->second.recorded) return false;
  ScopedContext scope(context_);
  if (capturing(consumer)) return false;  // an outside event cannot join a capture
  check(driver().cuStreamWaitEvent(as_stream(consumer), it->second.event, 0), "cuStreamWaitEvent (cross-stream reuse)");
  return true;
}

bool CudaStreamOrdering::is_complete(stream_t producer) {
  auto it = producers_.find(producer);
  if (it == producers_.end() || !it->second.recorded) return false;
  return driver().cuEventQuery(it->second.event) == CUDA_SUCCESS;
}

void CudaStreamOrdering::synchronize(stream_t producer) {
  auto it = producers_.find(producer);
  if (it != producers_.end() && it->second.recorded) driver().cuEventSynchronize(it->second.event);
}

// Blocks freed after their stream's last publish (or freed inside a graph capture): no event covers
// them, and their stream may be gone; the whole context is waited for.
void CudaStreamOrdering::synchronize_device() {
  ScopedContext scope(context_);
  driver().cuCtxSynchronize();
}

}  // namespace ncclpool::cuda

namespace ncclpool::cuda {

void CudaStreamOrdering::on_new_stream(stream_t stream) {
  std::lock_guard lock(known_mutex_);
  known_streams_.push_back(stream);
  first_served_by_.push_back(std::this_thread::get_id());  // thread_capturing() reads it by the same index
}

// The default stream answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking stream captures
// in global mode; the streams the pool served are asked one by one.
bool CudaStreamOrdering::device_capturing() {
  const Driver& d = driver();
  ScopedContext scope(context_);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult legacy = d.cuStreamIsCapturing(CU_STREAM_LEGACY, &status);
  if (legacy == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || status != CU_STREAM_CAPTURE_STATUS_NONE) return true;
  std::lock_guard lock(known_mutex_);
  for (stream_t s : known_streams_) {
    status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.cuStreamIsCapturing(as_stream(s), &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE) return true;
  }
  return false;
}

// The calling thread's capture, as the program makes it (every rank captures in the same threads at
// the same places): its per-thread default stream, and the streams this thread was the first to use
// with the pool (a capture stream is the capturing thread's: torch.cuda.graph allocates on it from
// that thread). Not the legacy stream: it answers "capturing" for a global-mode capture of any
// thread, which is one rank's state, not the program's.
bool CudaStreamOrdering::thread_capturing() {
  const Driver& d = driver();
  ScopedContext scope(context_);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d.cuStreamIsCapturing(CU_STREAM_PER_THREAD, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE) return true;
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard lock(known_mutex_);
  for (std::size_t i = 0; i < known_streams_.size(); ++i) {
    if (first_served_by_[i] != me) continue;
    status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.cuStreamIsCapturing(as_stream(known_streams_[i]), &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE) return true;
  }
  return false;
}

}  // namespace ncclpool::cuda
