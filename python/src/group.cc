// viper.ShardLayout / viper.ShardedPublisher / viper.ShardedSubscriber from
// Python (issue 28): thin bindings of transports/group.h and sharding.h.
//
// MPI: the Python layer initialises it (viper.mpi.init(), the module's
// MpiSession with MPI_THREAD_MULTIPLE) before creating a group object; here
// it must already be active. Group objects free their communicators in
// close(); the package closes live ones at exit before MPI is finalised.
#include "viper/transports/group.h"

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "viper/transports/mpi_session.h"
#include "viper/transports/sharding.h"

namespace viper {
namespace python {
namespace {

using transports::GroupLink;
using transports::GroupLinkName;
using transports::GroupRanks;
using transports::ShardedPublisher;
using transports::ShardedSubscriber;
using transports::ShardLayout;
using transports::ShardVersion;
using transports::TensorLayout;

// "auto" | "mpi" | "shm" | "gpu" (group.h's GroupLink); anything else a
// ValueError naming it.
GroupLink LinkOrRaise(const std::string& link, const std::string& what) {
  if (link == "auto") return GroupLink::kAuto;
  if (link == "mpi") return GroupLink::kMpi;
  if (link == "shm") return GroupLink::kShm;
  if (link == "gpu") return GroupLink::kGpu;
  throw py::value_error(what + ": link must be 'auto', 'mpi', 'shm' or 'gpu', not '" + link + "'");
}

void RequireMpi(const std::string& what) {
  if (!transports::MpiSession::Compiled()) Raise(UnavailableError(what + " needs MPI, and this build has none"));
  if (!transports::MpiSession::Active()) {
    Raise(UnavailableError(what + " needs MPI: start the job with mpirun (viper.mpi.init() first)"));
  }
}

GroupRanks RanksOrRaise(const std::vector<int>& producers, const std::vector<int>& consumers, int world_size,
                        const std::string& what) {
  GroupRanks r{producers, consumers};
  std::string error;
  if (!r.IsValid(world_size, &error)) throw py::value_error(what + ": " + error);
  return r;
}

// (name, dtype, shape, split_dim) per tensor.
py::list DescribeLayout(const ShardLayout& l) {
  py::list out;
  for (const TensorLayout& t : l.tensors()) {
    out.append(py::make_tuple(t.name, ToString(t.dtype), py::cast(t.shape), t.split_dim));
  }
  return out;
}

// Rank `rank`'s slices of `whole`, as writable tensors owned by Python (the
// copies ShardLayout::Slice made: nobody else reads them).
py::list SliceToBuffers(const ShardLayout& l, const py::list& whole_specs, int rank) {
  const ModelState whole = StateFromSpecs(whole_specs);
  auto slices = std::make_shared<ModelState>(ValueOrRaise(l.Slice(whole, rank)));
  py::list out;
  for (const Tensor& t : slices->tensors()) {
    Buffer b = TensorBuffer(slices, t);
    b.writable = true;
    out.append(py::make_tuple(t.name, ToString(t.dtype), py::cast(t.shape), b));
  }
  return out;
}

py::dict PublisherSummary(const ShardedPublisher::Summary& s) {
  py::dict d;
  d["published"] = s.published;
  d["version"] = s.version;
  d["shard_checksum"] = s.shard_checksum;
  d["sent_bytes"] = s.sent_bytes;
  d["sent"] = s.sent;
  d["committed"] = s.committed;
  d["whole_checksum"] = s.whole_checksum;
  d["update_s"] = s.update_s;
  d["ring_bytes"] = s.ring_bytes;
  d["message"] = s.message;
  d["brief"] = s.BriefReport();
  return d;
}

py::dict SubscriberSummary(const ShardedSubscriber::Summary& s) {
  py::dict d;
  d["received"] = s.received;
  d["version"] = s.version;
  d["verified"] = s.verified;
  d["committed"] = s.committed;
  d["received_bytes"] = s.received_bytes;
  d["slice_bytes"] = s.slice_bytes;
  d["staging_bytes"] = s.staging_bytes;
  d["receive_s"] = s.receive_s;
  d["commit_s"] = s.commit_s;
  d["pause_s"] = s.pause_s;
  d["serving"] = s.serving;
  d["in_doubt"] = s.in_doubt;
  d["resolved_version"] = s.resolved_version;
  d["resolved_committed"] = s.resolved_committed;
  d["message"] = s.message;
  d["brief"] = s.BriefReport();
  return d;
}

class PyShardedPublisher {
 public:
  PyShardedPublisher(const GroupRanks& ranks, const ShardLayout& layout, const ShardedPublisher::Options& o) {
    StatusOr<std::unique_ptr<ShardedPublisher>> p = InternalError("not created");
    {
      py::gil_scoped_release release;
      p = ShardedPublisher::Create(ranks, layout, o);
    }
    pub_ = ValueOrRaise(std::move(p));
  }
  ShardedPublisher& Get() const {
    if (!pub_) throw py::value_error("ShardedPublisher is closed");
    return *pub_;
  }
  py::dict Publish(const py::list& specs, int64_t iteration, bool publish) {
    ShardedPublisher& pub = Get();
    const ModelState shard = StateFromSpecs(specs);
    StatusOr<ShardedPublisher::Summary> s = InternalError("not published");
    {
      py::gil_scoped_release release;
      s = pub.Publish(shard, iteration, publish);
    }
    return PublisherSummary(ValueOrRaise(std::move(s)));
  }
  void Close() {
    py::gil_scoped_release release;
    pub_.reset();
  }

 private:
  std::unique_ptr<ShardedPublisher> pub_;
};

// A served double-buffer version (kept alive while Python references it):
// host memory (mpi, shm links) or device memory (gpu link).
struct PyShardVersion {
  std::shared_ptr<const ShardVersion> v;
  bool OnDevice() const {
    return !v->state.tensors().empty() && v->state.tensors()[0].memory == MemoryKind::kDevice;
  }
  // (name, dtype, shape, Buffer) per tensor: views of a host version; a
  // device version is first copied to host memory.
  py::list HostTensors() const { return HostTensorTuples(v, v->state); }
  // (name, dtype, shape, data_ptr, nbytes, device) per tensor of a device
  // version (as the single-producer Version's device_tensors).
  py::list DeviceTensors(int device) const { return DeviceTensorTuples(v->state, device); }
};

class PyShardedSubscriber {
 public:
  PyShardedSubscriber(const GroupRanks& ranks, const ShardLayout& layout, const ShardedSubscriber::Options& o,
                      const py::object& target_specs) {
    ModelState* target = nullptr;
    if (!target_specs.is_none()) {
      target_ = std::make_unique<ModelState>(StateFromSpecs(target_specs.cast<py::list>()));
      target = target_.get();
    }
    StatusOr<std::unique_ptr<ShardedSubscriber>> s = InternalError("not created");
    {
      py::gil_scoped_release release;
      s = ShardedSubscriber::Create(ranks, layout, o, target);
    }
    sub_ = ValueOrRaise(std::move(s));
  }
  ShardedSubscriber& Get() const {
    if (!sub_) throw py::value_error("ShardedSubscriber is closed");
    return *sub_;
  }
  py::dict ReceiveNext(double wait_s) {
    ShardedSubscriber& sub = Get();
    StatusOr<ShardedSubscriber::Summary> s = InternalError("not received");
    {
      py::gil_scoped_release release;
      s = sub.ReceiveNext(wait_s);
    }
    if (!s.ok() && s.status().code() == StatusCode::kNotFound) {
      PyErr_SetString(PyExc_TimeoutError, s.status().message().c_str());
      throw py::error_already_set();
    }
    return SubscriberSummary(ValueOrRaise(std::move(s)));
  }
  // Calls fn(version, iteration, whole_checksum) while the served version
  // is held stable; false when none is served.
  bool Serve(const py::function& fn) const {
    std::exception_ptr error;  // rethrown once Serve has let go of the version
    const bool served = Get().Serve([&](const ShardVersion& v) {
      try {
        fn(v.version, v.iteration, v.whole_checksum);
      } catch (...) {
        error = std::current_exception();
      }
    });
    if (error) std::rethrow_exception(error);
    return served;
  }
  py::object Current() const {
    auto v = Get().Current();
    if (!v) return py::none();
    return py::cast(PyShardVersion{std::move(v)});
  }
  void Close() {
    py::gil_scoped_release release;
    sub_.reset();
    target_.reset();
  }

 private:
  std::unique_ptr<ModelState> target_;  // borrowed tensors (the Python layer keeps them alive)
  std::unique_ptr<ShardedSubscriber> sub_;
};

ShardLayout LayoutFromTuples(int ranks, const py::list& tensors) {
  std::vector<TensorLayout> out;
  for (const py::handle& h : tensors) {
    const auto tup = h.cast<py::tuple>();
    if (tup.size() != 4) throw py::value_error("ShardLayout: each tensor is (name, dtype, shape, split_dim)");
    TensorLayout t;
    t.name = tup[0].cast<std::string>();
    const std::string dtype = tup[1].cast<std::string>();
    const std::optional<DType> d = DTypeFromString(dtype);
    if (!d) throw py::value_error("ShardLayout: tensor '" + t.name + "' has unknown dtype '" + dtype + "'");
    t.dtype = *d;
    t.shape = tup[2].cast<std::vector<int64_t>>();
    t.split_dim = tup[3].cast<int>();
    out.push_back(std::move(t));
  }
  return ValueOrRaise(ShardLayout::Make(ranks, std::move(out)));
}

}  // namespace

void BindGroup(py::module_& m) {
  py::class_<ShardLayout>(m, "ShardLayout")
      .def(py::init(&LayoutFromTuples), py::arg("ranks"), py::arg("tensors"))
      .def_static(
          "split_all",
          [](int ranks, const py::list& specs, int split_dim) {
            return ValueOrRaise(ShardLayout::SplitAll(ranks, StateFromSpecs(specs), split_dim));
          },
          py::arg("ranks"), py::arg("specs"), py::arg("split_dim"))
      .def_static("parse", [](const std::string& text) { return ValueOrRaise(ShardLayout::Parse(text)); })
      .def("serialize", &ShardLayout::Serialize)
      .def_property_readonly("ranks", &ShardLayout::ranks)
      .def("tensors", &DescribeLayout)
      .def("local_shape", &ShardLayout::LocalShape, py::arg("t"), py::arg("rank"))
      .def("local_bytes", &ShardLayout::LocalBytes, py::arg("t"), py::arg("rank"))
      .def("shard_bytes", &ShardLayout::ShardBytes, py::arg("rank"))
      .def("model_bytes", &ShardLayout::ModelBytes)
      .def("check_shard",
           [](const ShardLayout& l, const py::list& specs, int rank) {
             OkOrRaise(l.CheckShard(StateFromSpecs(specs), rank));
           },
           py::arg("specs"), py::arg("rank"))
      .def("slice", &SliceToBuffers, py::arg("whole_specs"), py::arg("rank"));

  py::class_<PyShardedPublisher>(m, "ShardedPublisher")
      .def(py::init([](const std::vector<int>& producers, const std::vector<int>& consumers, int world_size,
                       const ShardLayout& layout, double peer_timeout_s, double decision_timeout_s,
                       const std::string& link, uint64_t bucket_bytes, int ring_buckets, int gpu_device) {
             RequireMpi("ShardedPublisher");
             ShardedPublisher::Options o;
             o.gpu_device = gpu_device;
             o.peer_timeout_s = peer_timeout_s;
             o.decision_timeout_s = decision_timeout_s;
             o.link = LinkOrRaise(link, "ShardedPublisher");
             o.bucket_bytes = bucket_bytes;
             o.ring_buckets = ring_buckets;
             std::string error;
             if (!o.IsValid(&error)) throw py::value_error("ShardedPublisher: " + error);
             return std::make_unique<PyShardedPublisher>(RanksOrRaise(producers, consumers, world_size, "ShardedPublisher"),
                                                         layout, o);
           }),
           py::arg("producers"), py::arg("consumers"), py::arg("world_size"), py::arg("layout"),
           py::arg("peer_timeout_s"), py::arg("decision_timeout_s"), py::arg("link") = "auto",
           py::arg("bucket_bytes") = 0, py::arg("ring_buckets") = 1, py::arg("gpu_device") = 0)
      .def("publish", &PyShardedPublisher::Publish, py::arg("specs"), py::arg("iteration"),
           py::arg("publish"))
      .def_property_readonly("rank", [](const PyShardedPublisher& p) { return p.Get().rank(); })
      .def_property_readonly("link",
                             [](const PyShardedPublisher& p) { return GroupLinkName(p.Get().link()); })
      .def_property_readonly(
          "sends_bytes", [](const PyShardedPublisher& p) { return p.Get().plan().BytesFrom(p.Get().rank()); })
      .def("close", &PyShardedPublisher::Close);

  py::class_<PyShardVersion>(m, "ShardVersion")
      .def_property_readonly("version", [](const PyShardVersion& p) { return p.v->version; })
      .def_property_readonly("iteration", [](const PyShardVersion& p) { return p.v->iteration; })
      .def_property_readonly("whole_checksum", [](const PyShardVersion& p) { return p.v->whole_checksum; })
      .def_property_readonly("memory",
                             [](const PyShardVersion& p) { return p.OnDevice() ? "device" : "host"; })
      .def("host_tensors", &PyShardVersion::HostTensors)
      .def("device_tensors", &PyShardVersion::DeviceTensors, py::arg("device"));

  py::class_<PyShardedSubscriber>(m, "ShardedSubscriber")
      .def(py::init([](const std::vector<int>& producers, const std::vector<int>& consumers, int world_size,
                       const ShardLayout& layout, double peer_timeout_s, uint64_t bucket_bytes,
                       uint64_t chunk_bytes, py::object target, const std::string& link, int gpu_device) {
             RequireMpi("ShardedSubscriber");
             ShardedSubscriber::Options o;
             o.gpu_device = gpu_device;
             o.peer_timeout_s = peer_timeout_s;
             o.link = LinkOrRaise(link, "ShardedSubscriber");
             o.bucket_bytes = bucket_bytes;
             o.chunk_bytes = chunk_bytes;
             std::string error;
             if (!o.IsValid(&error)) throw py::value_error("ShardedSubscriber: " + error);
             return std::make_unique<PyShardedSubscriber>(RanksOrRaise(producers, consumers, world_size, "ShardedSubscriber"),
                                                          layout, o, target);
           }),
           py::arg("producers"), py::arg("consumers"), py::arg("world_size"), py::arg("layout"),
           py::arg("peer_timeout_s"), py::arg("bucket_bytes"), py::arg("chunk_bytes"), py::arg("target"),
           py::arg("link") = "auto", py::arg("gpu_device") = 0)
      .def("receive_next", &PyShardedSubscriber::ReceiveNext, py::arg("wait_s"))
      .def("serve", &PyShardedSubscriber::Serve, py::arg("fn"))
      .def("current", &PyShardedSubscriber::Current)
      .def_property_readonly("version", [](const PyShardedSubscriber& s) { return s.Get().version(); })
      .def_property_readonly("rank", [](const PyShardedSubscriber& s) { return s.Get().rank(); })
      .def_property_readonly("link",
                             [](const PyShardedSubscriber& s) { return GroupLinkName(s.Get().link()); })
      .def_property_readonly(
          "receives_bytes",
          [](const PyShardedSubscriber& s) { return s.Get().plan().BytesTo(s.Get().rank()); })
      .def("close", &PyShardedSubscriber::Close);
}

}  // namespace python
}  // namespace viper
