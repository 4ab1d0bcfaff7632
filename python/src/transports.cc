// viper.Publisher / viper.Subscriber / the MPI session, from Python.
//
// MPI: the module initialises MPI itself (MPI_Init_thread with
// MPI_THREAD_MULTIPLE, through transports::MpiSession) the first time a
// Publisher or Subscriber needs it (host and gpu tiers, pfs with push). When
// MPI is already initialised (mpi4py imported first: its default thread level
// is "multiple") it is used as is, after checking the thread level, and left
// for mpi4py to finalise. MPI is finalised by the module only when it
// initialised it, at interpreter exit, after every live Publisher is closed
// and every Subscriber stopped (finalize(), registered with atexit by the
// package).
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "bindings.h"
#include "viper/transports/device_memory.h"
#include "viper/transports/mpi_session.h"
#include "viper/transports/private_dir.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace python {
namespace {

using transports::ModelVersion;
using transports::Publisher;
using transports::Subscriber;

class PyPublisher;
class PySubscriber;

// Everything below is touched with the GIL held.
std::unique_ptr<transports::MpiSession> g_mpi;
std::set<PyPublisher*> g_publishers;
std::set<PySubscriber*> g_subscribers;

bool LaunchedByMpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

// Makes sure MPI is up with MPI_THREAD_MULTIPLE; `what` names the feature
// that needs it (for the error without mpirun).
void EnsureMpi(const std::string& what) {
  if (g_mpi) return;
  if (!transports::MpiSession::Compiled()) {
    Raise(UnavailableError(what + " needs MPI, and this build of Viper has none (the pfs tier with notify='poll' "
                                  "needs no MPI)"));
  }
  if (!transports::MpiSession::Active() && !LaunchedByMpirun()) {
    Raise(UnavailableError(what + " needs MPI: start the job with `mpirun -np 2 python3 script.py` (rank 0 "
                                  "publishes, the others subscribe); the pfs tier with notify='poll' needs no MPI"));
  }
  // Open MPI loads its components with dlopen and expects libmpi's symbols to
  // be global; Python loaded this module (and libmpi with it) RTLD_LOCAL.
  for (const char* soname : {"libmpi.so.40", "libmpi.so.12", "libmpi.so"}) {
    if (dlopen(soname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) != nullptr) break;
  }
  StatusOr<std::unique_ptr<transports::MpiSession>> s = InternalError("not started");
  {
    py::gil_scoped_release release;
    s = transports::MpiSession::Init(nullptr, nullptr);
  }
  g_mpi = ValueOrRaise(std::move(s));
}

template <typename E>
E EnumOrRaise(std::optional<E> e, const std::string& field, const std::string& value, const char* expected) {
  if (!e) throw py::value_error(field + " must be " + expected + ", got '" + value + "'");
  return *e;
}

bool NeedsMpi(transports::Tier tier, transports::Notify notify) {
  return tier != transports::Tier::kPfs || notify == transports::Notify::kPush;
}

// A served version: shares the Subscriber's immutable ModelVersion.
struct PyVersion {
  std::shared_ptr<const ModelVersion> v;

  // (name, dtype, shape, Buffer) per tensor, host memory: views into the
  // received image; a device version is first copied to host memory.
  py::list HostTensors() const { return HostTensorTuples(v, v->state); }

  // (name, dtype, shape, data_ptr, nbytes, device) per tensor of a device version.
  py::list DeviceTensors(int device) const {
    if (v->memory != MemoryKind::kDevice) throw py::value_error("this version is in host memory");
    return DeviceTensorTuples(v->state, device);
  }
};

// A ModelState made and owned by C++ (pre-touched F32 tensors): the
// benchmark publishes it to time the engine without Python in the way.
struct NativeState {
  ModelState state;
};

class PySubscriber {
 public:
  PySubscriber(const Subscriber::Options& o, py::object callback) : callback_(std::move(callback)) {
    if (NeedsMpi(o.tier, o.notify)) EnsureMpi(std::string("a Subscriber on the ") + ToString(o.tier) + " tier");
    Subscriber::Callback cb;
    if (!callback_.is_none()) {
      cb = [this](std::shared_ptr<const ModelVersion> v) {
        if (!active_.load() || !Py_IsInitialized()) return;
        py::gil_scoped_acquire gil;
        if (!active_.load()) return;
        try {
          callback_(PyVersion{std::move(v)});
        } catch (py::error_already_set& e) {
          e.discard_as_unraisable("viper.Subscriber callback");
        }
      };
    }
    StatusOr<std::unique_ptr<Subscriber>> s = InternalError("not created");
    {
      py::gil_scoped_release release;
      s = Subscriber::Create(o, std::move(cb));
    }
    sub_ = ValueOrRaise(std::move(s));
    g_subscribers.insert(this);
  }
  ~PySubscriber() {
    Stop();
    g_subscribers.erase(this);
  }

  py::object Current() const {
    auto v = sub_->Current();
    if (!v) return py::none();
    return py::cast(PyVersion{std::move(v)});
  }
  PyVersion WaitForVersion(uint64_t version, double timeout_s) {
    StatusOr<std::shared_ptr<const ModelVersion>> r = InternalError("not waited");
    {
      py::gil_scoped_release release;
      r = sub_->WaitForVersion(version, timeout_s);
    }
    if (!r.ok() && r.status().code() == StatusCode::kUnavailable) {
      PyErr_SetString(PyExc_TimeoutError, r.status().message().c_str());
      throw py::error_already_set();
    }
    return PyVersion{ValueOrRaise(std::move(r))};
  }
  bool WaitUntilDone(double timeout_s) {
    py::gil_scoped_release release;
    return sub_->WaitUntilDone(timeout_s);
  }
  void Stop() {
    active_ = false;
    if (!sub_) return;
    py::gil_scoped_release release;
    sub_->Stop();
  }
  py::dict Summary() const {
    const auto s = sub_->summary();
    py::dict d;
    d["received"] = s.received;
    d["rejected"] = s.rejected;
    d["bytes_moved"] = s.bytes_moved;
    d["delta_versions"] = s.delta_versions;
    d["delta_copies_avoided"] = s.delta_copies_avoided;
    d["delta_copied_bytes"] = s.delta_copied_bytes;
    d["producer_finished"] = s.producer_finished;
    d["producer_lost"] = s.producer_lost;
    d["message"] = s.message;
    d["brief"] = s.BriefReport();
    py::list rejections;
    for (const auto& r : sub_->Rejections()) {
      rejections.append(py::make_tuple(r.version, r.source, r.status.ToString()));
    }
    d["rejections"] = rejections;
    return d;
  }

 private:
  py::object callback_;
  std::atomic<bool> active_{true};
  std::unique_ptr<Subscriber> sub_;
};

class PyPublisher {
 public:
  explicit PyPublisher(const Publisher::Options& o) {
    if (NeedsMpi(o.tier, o.notify)) EnsureMpi(std::string("a Publisher on the ") + ToString(o.tier) + " tier");
    StatusOr<std::unique_ptr<Publisher>> p = InternalError("not created");
    {
      py::gil_scoped_release release;
      p = Publisher::Create(o);
    }
    pub_ = ValueOrRaise(std::move(p));
    g_publishers.insert(this);
  }
  ~PyPublisher() {
    try {
      Close();
    } catch (...) {
    }
    g_publishers.erase(this);
  }

  Publisher::VersionReport Publish(const py::list& specs, int64_t iteration) {
    if (closed_) throw py::value_error("publish: the Publisher is closed");
    const ModelState state = StateFromSpecs(specs);
    StatusOr<Publisher::VersionReport> r = InternalError("not published");
    {
      py::gil_scoped_release release;
      r = pub_->Publish(state, iteration);
    }
    return ValueOrRaise(std::move(r));
  }
  // Publishes a C++-owned state: no Python objects, no spec conversion.
  Publisher::VersionReport PublishNative(const NativeState& native, int64_t iteration) {
    if (closed_) throw py::value_error("publish: the Publisher is closed");
    StatusOr<Publisher::VersionReport> r = InternalError("not published");
    {
      py::gil_scoped_release release;
      r = pub_->Publish(native.state, iteration);
    }
    return ValueOrRaise(std::move(r));
  }
  void Flush() {
    Status s;
    {
      py::gil_scoped_release release;
      s = pub_->Flush();
    }
    OkOrRaise(s);
  }
  void Close() {
    if (closed_) return;
    closed_ = true;
    Status s;
    {
      py::gil_scoped_release release;
      s = pub_->Close();
    }
    OkOrRaise(s);
  }
  std::vector<Publisher::VersionReport> Reports() const { return pub_->Reports(); }
  py::dict Summary() const {
    const auto s = pub_->summary();
    py::dict d;
    d["published"] = s.published;
    d["sent"] = s.sent;
    d["superseded"] = s.superseded;
    d["lost_consumers"] = s.lost_consumers;
    d["total_stall_s"] = s.total_stall_s;
    d["message"] = s.message;
    d["brief"] = s.BriefReport();
    return d;
  }

 private:
  std::unique_ptr<Publisher> pub_;
  bool closed_ = false;
};

// Closes every live Publisher, stops every Subscriber, then finalises MPI
// when this module initialised it. Called at interpreter exit.
void Finalize() {
  for (PyPublisher* p : std::set<PyPublisher*>(g_publishers)) {
    try {
      p->Close();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("viper: closing a Publisher at exit");
    } catch (const std::exception&) {
    }
  }
  for (PySubscriber* s : std::set<PySubscriber*>(g_subscribers)) s->Stop();
  if (g_mpi) {
    py::gil_scoped_release release;
    g_mpi.reset();
  }
}

}  // namespace

void BindTransports(py::module_& m) {
  py::class_<Publisher::ConsumerResult>(m, "ConsumerResult", "What happened to one version at one consumer.")
      .def_readonly("rank", &Publisher::ConsumerResult::rank)
      .def_readonly("delivered", &Publisher::ConsumerResult::delivered)
      .def_readonly("lost", &Publisher::ConsumerResult::lost)
      .def_readonly("servable_s", &Publisher::ConsumerResult::servable_s)
      .def_readonly("load_s", &Publisher::ConsumerResult::load_s)
      .def_readonly("message", &Publisher::ConsumerResult::message)
      .def_readonly("bytes_moved", &Publisher::ConsumerResult::bytes_moved)
      .def_readonly("encoding", &Publisher::ConsumerResult::encoding)
      .def_readonly("encoding_reason", &Publisher::ConsumerResult::encoding_reason,
                    "why this consumer got a delta or the full version (empty with delta off), e.g. "
                    "'full: on the producer's node (shared memory)'")
      .def("__repr__", [](const Publisher::ConsumerResult& c) {
        return "ConsumerResult(rank=" + std::to_string(c.rank) + ", delivered=" + (c.delivered ? "True" : "False") +
               ", servable_s=" + std::to_string(c.servable_s) + ")";
      });
  py::class_<Publisher::VersionReport>(m, "VersionReport",
                                       "One published version: stall, snapshot, transfer, per-consumer servable time.")
      .def_readonly("version", &Publisher::VersionReport::version)
      .def_readonly("iteration", &Publisher::VersionReport::iteration)
      .def_readonly("bytes", &Publisher::VersionReport::bytes)
      .def_readonly("stall_s", &Publisher::VersionReport::stall_s)
      .def_readonly("snapshot_s", &Publisher::VersionReport::snapshot_s)
      .def_readonly("transfer_s", &Publisher::VersionReport::transfer_s)
      .def_readonly("written_bytes", &Publisher::VersionReport::written_bytes)
      .def_readonly("encoding", &Publisher::VersionReport::encoding)
      .def_readonly("notify_s", &Publisher::VersionReport::notify_s)
      .def_readonly("superseded", &Publisher::VersionReport::superseded)
      .def_readonly("sent", &Publisher::VersionReport::sent)
      .def_readonly("consumers", &Publisher::VersionReport::consumers)
      .def("brief_report", &Publisher::VersionReport::BriefReport)
      .def("__repr__", &Publisher::VersionReport::BriefReport);

  py::class_<PyVersion>(m, "Version")
      .def_property_readonly("version", [](const PyVersion& p) { return p.v->state.metadata.version; })
      .def_property_readonly("iteration", [](const PyVersion& p) { return p.v->state.metadata.iteration; })
      .def_property_readonly("producer", [](const PyVersion& p) { return p.v->state.metadata.producer_id; })
      .def_property_readonly("nbytes", [](const PyVersion& p) { return p.v->size_bytes; })
      .def_property_readonly("checksum", [](const PyVersion& p) { return p.v->checksum; })
      .def_property_readonly("tier", [](const PyVersion& p) { return transports::ToString(p.v->tier); })
      .def_property_readonly("memory", [](const PyVersion& p) { return ToString(p.v->memory); })
      .def_property_readonly("source", [](const PyVersion& p) { return p.v->source; })
      .def_property_readonly("receive_s", [](const PyVersion& p) { return p.v->receive_s; })
      .def_property_readonly("verify_s", [](const PyVersion& p) { return p.v->verify_s; })
      .def_property_readonly("address", [](const PyVersion& p) { return reinterpret_cast<uintptr_t>(p.v.get()); })
      .def("host_tensors", &PyVersion::HostTensors)
      .def("device_tensors", &PyVersion::DeviceTensors, py::arg("device"));

  py::class_<PyPublisher>(m, "Publisher")
      .def(py::init([](const std::string& tier, const std::string& mode, const std::string& notify,
                       const std::string& pfs_dir, const std::string& host_protocol, const std::string& fanout,
                       uint64_t staging_bytes, int snapshot_threads, std::vector<int> subscriber_ranks,
                       double peer_timeout_s, bool wait_for_servable, bool o_direct, int pfs_keep_versions,
                       int producer_id, int gpu_device, uint64_t chunk_bytes, const std::string& session_id,
                       const std::string& hmac_key_file, bool pfs_delta, const std::string& delta) {
             Publisher::Options o;
             o.tier = EnumOrRaise(transports::TierFromString(tier), "tier", tier, "gpu, host or pfs");
             o.mode = EnumOrRaise(transports::ModeFromString(mode), "mode", mode, "sync or async");
             o.notify = EnumOrRaise(transports::NotifyFromString(notify), "notify", notify, "push or poll");
             o.host_protocol = EnumOrRaise(transports::HostProtocolFromString(host_protocol), "host_protocol",
                                           host_protocol, "shm, two-sided or one-sided");
             o.fanout = EnumOrRaise(transports::FanoutFromString(fanout), "fanout", fanout, "node, direct or tree");
             o.pfs_dir = pfs_dir;
             o.staging_bytes = staging_bytes;
             o.snapshot_threads = snapshot_threads;
             o.subscriber_ranks = std::move(subscriber_ranks);
             o.peer_timeout_s = peer_timeout_s;
             o.wait_for_servable = wait_for_servable;
             o.o_direct = o_direct;
             o.pfs_keep_versions = pfs_keep_versions;
             o.producer_id = producer_id;
             o.gpu_device = gpu_device;
             o.chunk_bytes = chunk_bytes;
             o.session_id = session_id;
             o.hmac_key_file = hmac_key_file;
             o.pfs_delta = pfs_delta;
             o.delta = EnumOrRaise(transports::DeltaModeFromString(delta), "delta", delta, "auto, on or off");
             std::string error;
             if (!o.IsValid(&error)) throw py::value_error("Publisher: " + error);
             return std::make_unique<PyPublisher>(o);
           }),
           py::arg("tier"), py::arg("mode"), py::arg("notify"), py::arg("pfs_dir"), py::arg("host_protocol"),
           py::arg("fanout"), py::arg("staging_bytes"), py::arg("snapshot_threads"), py::arg("subscriber_ranks"),
           py::arg("peer_timeout_s"), py::arg("wait_for_servable"), py::arg("o_direct"), py::arg("pfs_keep_versions"),
           py::arg("producer_id"), py::arg("gpu_device"), py::arg("chunk_bytes"), py::arg("session_id") = "",
           py::arg("hmac_key_file") = "", py::arg("pfs_delta") = false, py::arg("delta") = "auto")
      .def("publish", &PyPublisher::Publish, py::arg("specs"), py::arg("iteration"))
      .def("_publish_native", &PyPublisher::PublishNative, py::arg("state"), py::arg("iteration"))
      .def("flush", &PyPublisher::Flush)
      .def("close", &PyPublisher::Close)
      .def("reports", &PyPublisher::Reports)
      .def("summary", &PyPublisher::Summary);

  py::class_<PySubscriber>(m, "Subscriber")
      .def(py::init([](const std::string& tier, const std::string& notify, const std::string& pfs_dir,
                       double poll_period_s, const std::string& host_protocol, int producer_rank,
                       uint64_t window_slot_bytes, double producer_timeout_s, double transfer_timeout_s,
                       uint64_t preallocate_bytes, int idle_sleep_us, bool o_direct, int gpu_device, bool allow_ipc,
                       bool allow_shm, py::object callback, const std::string& session_id,
                       const std::string& hmac_key_file) {
             Subscriber::Options o;
             o.tier = EnumOrRaise(transports::TierFromString(tier), "tier", tier, "gpu, host or pfs");
             o.notify = EnumOrRaise(transports::NotifyFromString(notify), "notify", notify, "push or poll");
             o.host_protocol = EnumOrRaise(transports::HostProtocolFromString(host_protocol), "host_protocol",
                                           host_protocol, "shm, two-sided or one-sided");
             o.pfs_dir = pfs_dir;
             o.poll_period_s = poll_period_s;
             o.producer_rank = producer_rank;
             o.window_slot_bytes = window_slot_bytes;
             o.producer_timeout_s = producer_timeout_s;
             o.transfer_timeout_s = transfer_timeout_s;
             o.preallocate_bytes = preallocate_bytes;
             o.idle_sleep_us = idle_sleep_us;
             o.o_direct = o_direct;
             o.gpu_device = gpu_device;
             o.allow_ipc = allow_ipc;
             o.allow_shm = allow_shm;
             o.session_id = session_id;
             o.hmac_key_file = hmac_key_file;
             std::string error;
             if (!o.IsValid(&error)) throw py::value_error("Subscriber: " + error);
             if (!callback.is_none() && !PyCallable_Check(callback.ptr())) {
               throw py::value_error("Subscriber: callback must be callable");
             }
             return std::make_unique<PySubscriber>(o, std::move(callback));
           }),
           py::arg("tier"), py::arg("notify"), py::arg("pfs_dir"), py::arg("poll_period_s"), py::arg("host_protocol"),
           py::arg("producer_rank"), py::arg("window_slot_bytes"), py::arg("producer_timeout_s"),
           py::arg("transfer_timeout_s"), py::arg("preallocate_bytes"), py::arg("idle_sleep_us"), py::arg("o_direct"),
           py::arg("gpu_device"), py::arg("allow_ipc"), py::arg("allow_shm"), py::arg("callback"),
           py::arg("session_id") = "", py::arg("hmac_key_file") = "")
      .def("current", &PySubscriber::Current)
      .def("wait_for_version", &PySubscriber::WaitForVersion, py::arg("version"), py::arg("timeout_s"))
      .def("wait_until_done", &PySubscriber::WaitUntilDone, py::arg("timeout_s"))
      .def("stop", &PySubscriber::Stop)
      .def("summary", &PySubscriber::Summary);

  m.def("new_session_id", &transports::NewSessionId,
        "32 hex digits from the kernel's random source: a run's identity (Publisher/Subscriber session_id).");

  py::class_<NativeState>(m, "_NativeState", "A model made in C++ (for the benchmark's C++ baseline).")
      .def_property_readonly("nbytes", [](const NativeState& n) { return n.state.TotalBytes(); });
  m.def(
      "_native_state",
      [](const std::vector<uint64_t>& tensor_bytes) {
        NativeState n;
        for (size_t k = 0; k < tensor_bytes.size(); ++k) {
          Tensor t = Tensor::Allocate("t" + std::to_string(k), DType::kF32, {static_cast<int64_t>(tensor_bytes[k] / 4)});
          std::memset(t.data, static_cast<int>(0x3c + k), t.size_bytes);
          OkOrRaise(n.state.Add(std::move(t)));
        }
        return n;
      },
      py::arg("tensor_bytes"), "F32 tensors of these sizes (rounded down to 4 bytes), allocated and touched in C++.");
  m.def(
      "mpi_init",
      []() {
        EnsureMpi("viper.mpi.init()");
        return py::make_tuple(g_mpi->rank(), g_mpi->size(), g_mpi->owns_init());
      },
      "Initialises MPI (MPI_THREAD_MULTIPLE) unless it is; returns (rank, size, initialised_here).");
  m.def("mpi_active", []() { return transports::MpiSession::Active(); });
  m.def("mpi_launched", &LaunchedByMpirun, "True when started by mpirun (its environment variables are set).");
  m.def("mpi_barrier", []() {
    EnsureMpi("viper.mpi.barrier()");
    Status s;
    {
      py::gil_scoped_release release;
      s = transports::MpiSession::Barrier();
    }
    OkOrRaise(s);
  });
  m.def("finalize", &Finalize,
        "Closes live Publishers, stops Subscribers, finalises MPI if this module initialised it (at exit).");
  m.def("cuda_device_available", []() {
    std::string reason;
    const bool ok = transports::CudaDeviceAvailable(&reason);
    return py::make_tuple(ok, reason);
  });
}

}  // namespace python
}  // namespace viper
