// The control protocol, both halves (control.h). MPI builds only; without
// MPI, mpi_stub.cc.
#include "control.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "mpi_link.h"
#include "viper/core/log.h"

namespace viper {
namespace transports {
namespace internal {

namespace {

// Both halves need MPI_THREAD_MULTIPLE and a private, error-returning
// duplicate of MPI_COMM_WORLD.
Status OpenLink(MpiLink* link) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    return FailedPreconditionError(
        "MPI is not initialised: create a transports::MpiSession (or call MPI_Init_thread) first");
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    return FailedPreconditionError("MPI was initialised without MPI_THREAD_MULTIPLE");
  }
  if (MPI_Comm_dup(MPI_COMM_WORLD, &link->comm) != MPI_SUCCESS) return AbortedError("MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(link->comm, MPI_ERRORS_RETURN);
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------- producer

ProducerControl::ProducerControl(const Publisher::Options& options)
    : options_(options), link_(std::make_unique<MpiLink>()) {}

ProducerControl::~ProducerControl() {
  // Not freed (Open MPI frees it at MPI_Finalize): a message still in
  // flight on a freed communicator is matched on the next one that
  // reuses its context id, with Open MPI's per-peer sequence numbers out
  // of step, and that pair then loses its handshakes (seen at np 3 with
  // bound ranks: the goodbye to consumers that had already given up on a
  // silent producer). Session ids cannot repair that; unique ids can.
  link_->comm = MPI_COMM_NULL;
}

StatusOr<std::unique_ptr<ProducerControl>> ProducerControl::Open(const Publisher::Options& options) {
  std::unique_ptr<ProducerControl> c(new ProducerControl(options));
  VIPER_RETURN_IF_ERROR(OpenLink(c->link_.get()));
  MPI_Comm comm = c->link_->comm;
  int size = 1;
  MPI_Comm_rank(comm, &c->rank_);
  NodeName(c->host_, sizeof(c->host_));
  VIPER_ASSIGN_OR_RETURN(c->session_, AgreeOnSession(comm, c->rank_));
  MPI_Comm_size(comm, &size);
  if (options.subscriber_ranks.empty()) {
    for (int r = 0; r < size; ++r) {
      if (r != c->rank_) c->live_.push_back(r);
    }
  } else {
    for (int r : options.subscriber_ranks) {
      if (r >= size || r == c->rank_) {
        return InvalidArgumentError("subscriber_ranks: rank " + std::to_string(r) +
                                    " is this rank or outside [0, " + std::to_string(size) + ")");
      }
      c->live_.push_back(r);
    }
  }
  return c;
}

Announce ProducerControl::AnnounceStaged(AnnounceKind kind, uint64_t version, int64_t iteration,
                                         uint64_t image_bytes, uint64_t checksum) const {
  Announce a;
  a.session = session_;
  a.kind = kind;
  a.protocol = static_cast<uint32_t>(options_.host_protocol);
  a.version = version;
  a.iteration = iteration;
  a.image_bytes = image_bytes;
  a.checksum = checksum;
  a.handshake_s = options_.peer_timeout_s;
  std::memcpy(a.host, host_, sizeof(a.host));
  a.sent_wtime = MonotonicSeconds();
  return a;
}

std::vector<int> ProducerControl::Tell(const Announce& a, const std::string& what, SendOutcome* out) {
  const std::vector<int> live = live_;  // a copy: Drop changes live_
  std::vector<int> told;
  Announce stamped = a;
  stamped.sent_wtime = MonotonicSeconds();  // notify_s at the consumers counts from here
  for (int r : live) {
    if (SendPod(link_->comm, r, kTagAnnounce, stamped, options_.peer_timeout_s).ok()) {
      told.push_back(r);
    } else {
      Drop(r, what + " was not taken within peer_timeout_s", out);
    }
  }
  return told;
}

StatusOr<ReadyList> ProducerControl::Handshake(const Announce& a, SendOutcome* out) {
  MPI_Comm comm = link_->comm;
  const std::vector<int> told = Tell(a, "the announcement", out);
  ReadyList ready;
  const double deadline = MonotonicSeconds() + options_.peer_timeout_s;
  std::vector<int> waiting = told;
  Backoff backoff(20);
  while (!waiting.empty()) {
    Ready msg;
    int from = -1;
    auto got = TryRecvPod(comm, MPI_ANY_SOURCE, kTagReady, &msg, &from);
    if (!got.ok()) return got.status();
    if (*got) {
      auto it = std::find(waiting.begin(), waiting.end(), from);
      if (it == waiting.end() || msg.session != session_ || msg.version != a.version) continue;  // stale
      waiting.erase(it);
      if (msg.accept) {
        ready.push_back({from, msg});
      } else {
        Publisher::ConsumerResult c;
        c.rank = from;
        c.message = "refused: no room for the version (window slot, landing buffer or device memory)";
        out->consumers.push_back(c);
      }
      backoff.Reset();
      continue;
    }
    if (MonotonicSeconds() > deadline) {
      for (int r : waiting) Drop(r, "no handshake within peer_timeout_s", out);
      break;
    }
    backoff.Pause();
  }
  return ready;
}

FanoutPlan ProducerControl::Route(const Announce& a, bool routed, const ReadyList& ready, SendOutcome* out,
                                  std::vector<int>* acking) {
  std::vector<std::pair<int, std::string>> accepted;
  for (const auto& [rank, msg] : ready) {
    accepted.push_back({rank, std::string(msg.host, strnlen(msg.host, sizeof(msg.host)))});
  }
  std::sort(accepted.begin(), accepted.end());
  std::vector<int> ranks;
  std::vector<std::string> hosts;
  for (const auto& [rank, host] : accepted) {
    ranks.push_back(rank);
    hosts.push_back(host);
  }
  FanoutPlan fan =
      PlanFanout(options_.fanout, options_.tree_arity, kMaxRelayChildren, rank_, host_, ranks, hosts);
  *acking = ranks;
  if (!routed) return fan;
  for (int rank : ranks) {
    internal::Route route;
    route.session = session_;
    route.version = a.version;
    route.parent = fan.parent.at(rank);
    const std::vector<int>& children = fan.ChildrenOf(rank);
    route.children_count = static_cast<int32_t>(children.size());
    std::copy(children.begin(), children.end(), route.children);
    // Below the producer's own wait for acknowledgements, so that a
    // consumer behind a relay that died says so before it would be dropped.
    route.relay_timeout_s = 0.75 * options_.peer_timeout_s;
    if (!SendPod(link_->comm, rank, kTagRoute, route, options_.peer_timeout_s).ok()) {
      Drop(rank, "the route was not taken within peer_timeout_s", out);
      acking->erase(std::remove(acking->begin(), acking->end(), rank), acking->end());
    }
  }
  return fan;
}

void ProducerControl::CollectAcks(uint64_t version, const std::vector<int>& ranks, double start_s,
                                  SendOutcome* out) {
  std::vector<int> waiting = ranks;
  const double deadline = MonotonicSeconds() + options_.peer_timeout_s;
  Backoff backoff(20);
  while (!waiting.empty()) {
    Ack ack;
    int from = -1;
    auto got = TryRecvPod(link_->comm, MPI_ANY_SOURCE, kTagAck, &ack, &from);
    if (!got.ok()) {
      // The receive itself failed: the ranks still waited on are reported
      // as not acknowledged, with why (they are not dropped: the error
      // may be this rank's, not theirs).
      const std::string why = "no acknowledgement: receiving failed: " + got.status().ToString();
      for (int r : waiting) {
        Publisher::ConsumerResult c;
        c.rank = r;
        c.message = why;
        out->consumers.push_back(c);
      }
      Log(LogLevel::kError, "transports", "version " + std::to_string(version) + ": " + why);
      return;
    }
    if (*got) {
      auto it = std::find(waiting.begin(), waiting.end(), from);
      if (it == waiting.end() || ack.session != session_ || ack.version != version) continue;  // stale
      waiting.erase(it);
      Publisher::ConsumerResult c;
      c.rank = from;
      c.delivered = ack.ok != 0;
      c.servable_s = MonotonicSeconds() - start_s;
      c.load_s = ack.load_s;
      c.bytes_moved = ack.bytes_moved;
      if (!c.delivered) c.message = std::string("rejected: ") + ToString(static_cast<StatusCode>(ack.code));
      out->consumers.push_back(c);
      backoff.Reset();
      continue;
    }
    if (MonotonicSeconds() > deadline) {
      for (int r : waiting) Drop(r, "no acknowledgement within peer_timeout_s", out);
      return;
    }
    backoff.Pause();
  }
}

Status ProducerControl::SendDone(int rank, const Announce& msg) {
  return SendPod(link_->comm, rank, kTagDone, msg, options_.peer_timeout_s);
}

void ProducerControl::NotifyDurable(const Announce& a, double start_s, bool wait_for_acks, SendOutcome* out,
                                    const std::function<void()>& meanwhile) {
  const double t0 = MonotonicSeconds();
  const std::vector<int> told = Tell(a, "the notification", out);
  out->notify_s = MonotonicSeconds() - t0;
  if (meanwhile) meanwhile();
  if (wait_for_acks) CollectAcks(a.version, told, start_s, out);
}

void ProducerControl::Drop(int rank, const std::string& why, SendOutcome* out) {
  live_.erase(std::remove(live_.begin(), live_.end(), rank), live_.end());
  Publisher::ConsumerResult c;
  c.rank = rank;
  c.lost = true;
  c.message = why;
  out->consumers.push_back(c);
  Log(LogLevel::kWarning, "transports", "consumer rank " + std::to_string(rank) + " dropped: " + why);
}

void ProducerControl::Close() {
  if (closed_) return;
  closed_ = true;
  Announce bye;
  bye.session = session_;
  bye.kind = kAnnounceBye;
  for (int r : live_) (void)SendPod(link_->comm, r, kTagAnnounce, bye, options_.peer_timeout_s);
}

// ---------------------------------------------------------------- consumer

ConsumerControl::ConsumerControl(const Subscriber::Options& options)
    : options_(options), link_(std::make_unique<MpiLink>()) {}

ConsumerControl::~ConsumerControl() {
  link_->comm = MPI_COMM_NULL;  // not freed: see ~ProducerControl (context ids must not be reused)
}

StatusOr<std::unique_ptr<ConsumerControl>> ConsumerControl::Open(const Subscriber::Options& options) {
  std::unique_ptr<ConsumerControl> c(new ConsumerControl(options));
  VIPER_RETURN_IF_ERROR(OpenLink(c->link_.get()));
  MPI_Comm comm = c->link_->comm;
  MPI_Comm_size(comm, &c->size_);
  MPI_Comm_rank(comm, &c->rank_);
  NodeName(c->host_, sizeof(c->host_));
  if (options.producer_rank >= c->size_) {
    return InvalidArgumentError("producer_rank: " + std::to_string(options.producer_rank) +
                                " is outside [0, " + std::to_string(c->size_) + ")");
  }
  VIPER_ASSIGN_OR_RETURN(c->session_, AgreeOnSession(comm, options.producer_rank));
  return c;
}

StatusOr<std::optional<Announce>> ConsumerControl::NextAnnouncement() {
  for (;;) {
    Announce a;
    auto got = TryRecvPod(link_->comm, producer(), kTagAnnounce, &a);
    if (!got.ok())
      return AbortedError("link to producer " + ProducerName() + " broke: " + got.status().message());
    if (!*got) return std::optional<Announce>();
    if (a.session == session_) return std::optional<Announce>(a);
    // Left over from an earlier pair on a reused context id: skipped.
  }
}

Ready ConsumerControl::ReadyFor(const Announce& a) const {
  Ready ready;
  ready.session = session_;
  ready.version = a.version;
  std::memcpy(ready.host, host_, sizeof(ready.host));
  return ready;
}

Status ConsumerControl::SendReady(const Announce& a, const Ready& ready) {
  return SendPod(link_->comm, producer(), kTagReady, ready, TransferWindow(a));
}

Status ConsumerControl::AwaitRoute(uint64_t version, double deadline, internal::Route* route) {
  Backoff backoff(options_.idle_sleep_us);
  for (;;) {
    VIPER_ASSIGN_OR_RETURN(bool got, TryRecvPod(link_->comm, producer(), kTagRoute, route));
    if (got && route->session == session_ && route->version == version) break;
    if (got) continue;  // stale
    if (MonotonicSeconds() > deadline) {
      return AbortedError("no route for version " + std::to_string(version) +
                          " in time (transfer_timeout_s " + "after the producer's handshake wait)");
    }
    backoff.Pause();
  }
  auto bad_rank = [&](int r) { return r < 0 || r >= size_ || r == rank_; };
  bool ok = !bad_rank(route->parent) && route->children_count >= 0 &&
            route->children_count <= kMaxRelayChildren && route->relay_timeout_s > 0;
  for (int i = 0; ok && i < route->children_count; ++i) ok = !bad_rank(route->children[i]);
  if (!ok) return AbortedError("the route of version " + std::to_string(version) + " is inconsistent");
  return Status::Ok();
}

Status ConsumerControl::AwaitDone(const Announce& a) {
  Announce done;
  const double deadline = TransferDeadline(a);
  Backoff backoff(options_.idle_sleep_us);
  for (;;) {
    VIPER_ASSIGN_OR_RETURN(bool got, TryRecvPod(link_->comm, producer(), kTagDone, &done));
    if (got && done.session == session_ && done.version == a.version) return Status::Ok();
    if (MonotonicSeconds() > deadline)
      return AbortedError("no completion message within " + WindowText(a) + " s");
    backoff.Pause();
  }
}

void ConsumerControl::Acknowledge(const Announce& a, const Status& status, double load_s, double notify_s,
                                  uint64_t bytes_moved) {
  Ack ack;
  ack.session = session_;
  ack.version = a.version;
  ack.ok = status.ok() ? 1 : 0;
  ack.code = static_cast<int32_t>(status.code());
  ack.load_s = load_s;
  ack.notify_s = notify_s;
  ack.bytes_moved = bytes_moved;
  (void)SendPod(link_->comm, producer(), kTagAck, ack, TransferWindow(a));
}

double ConsumerControl::TransferWindow(const Announce& a) const {
  return std::max(0.0, a.handshake_s) + options_.transfer_timeout_s;
}

double ConsumerControl::TransferDeadline(const Announce& a) const {
  return MonotonicSeconds() + TransferWindow(a);
}

std::string ConsumerControl::WindowText(const Announce& a) const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", TransferWindow(a));
  return buf;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
