// The consumer group's two-phase commit (group.h): consumer rank 0 decides
// from every rank's vote and records the decision before sending it; a rank
// that voted yes and hears nothing is in doubt and asks rank 0 later.
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "group_subscriber_impl.h"
#include "group_testing.h"

namespace viper {
namespace transports {

using namespace internal;  // NOLINT: the protocol's constants and helpers

ShardedSubscriber::Impl::Outcome ShardedSubscriber::Impl::Commit(uint64_t version, bool ok, uint64_t whole,
                                                                 double deadline_s) {
  const int Q = g_.q_layout.ranks();
  VoteMsg vote;
  vote.version = version;
  vote.yes = ok ? 1 : 0;
  vote.whole_checksum = whole;
  if (g_.rank != 0) {
    // Voted no: rank 0 cannot commit without this rank, the outcome is
    // known. Voted yes: only rank 0's decision says; without it the rank is
    // in doubt (a vote that may or may not have arrived included).
    const Outcome unknown = ok ? Outcome::kInDoubt : Outcome::kAborted;
    if (!internal::SendPod(g_.all, g_.consumers[0], kGroupTagVote, vote, Timeout(version)).ok())
      return unknown;
    VoteMsg decision;
    if (!WaitPod<VoteMsg>(g_.all, g_.consumers[0], kGroupTagCommit, deadline_s, &decision,
                          [version](const VoteMsg& m) { return m.version == version; })) {
      return unknown;
    }
    if (fault_version_ == version && fault_ == GroupFault::kDropDecision) return unknown;
    return decision.yes == 1 ? Outcome::kCommitted : Outcome::kAborted;
  }
  bool yes = ok;
  for (int c = 1; c < Q && yes; ++c) {
    VoteMsg v;
    yes = WaitPod<VoteMsg>(
              g_.all, g_.consumers[c], kGroupTagVote, deadline_s, &v,
              [version](const VoteMsg& m) { return m.version == version; }, [this] { AnswerQueries(); }) &&
          v.yes == 1 && v.whole_checksum == whole;
  }
  // Recorded before anyone hears it: a rank in doubt gets this answer.
  decisions_[version] = yes;
  if (fault_version_ == version && fault_ == GroupFault::kExitAfterDecision) _exit(0);
  AnswerQueries();
  while (decisions_.size() > kDecisionsKept) decisions_.erase(decisions_.begin());
  vote.yes = yes ? 1 : 0;
  for (int c = 1; c < Q; ++c)
    (void)internal::SendPod(g_.all, g_.consumers[c], kGroupTagCommit, vote, Timeout(version));
  (void)internal::SendPod(g_.all, g_.producers[0], kGroupTagAck, vote, Timeout(version));
  return yes ? Outcome::kCommitted : Outcome::kAborted;
}

void ShardedSubscriber::Impl::AnswerQueries() {
  while (true) {
    VoteMsg q;
    int from = -1;
    auto got = internal::TryRecvPod(g_.all, MPI_ANY_SOURCE, kGroupTagQuery, &q, &from);
    if (!got.ok() || !*got) break;
    if (q.magic == kMagic) queries_.emplace_back(from, q.version);
  }
  std::vector<std::pair<int, uint64_t>> later;
  for (const auto& [from, version] : queries_) {
    auto it = decisions_.find(version);
    VoteMsg a;
    a.version = version;
    if (it != decisions_.end()) {
      a.yes = it->second ? 1 : 0;
    } else if (version < last_attempted_ || (!decisions_.empty() && version < decisions_.begin()->first)) {
      // Never decided here, and this rank has gone past it: nobody committed
      // it (only this rank decides). A version older than the record: this
      // rank may have committed it, but a later one committed since or not;
      // answering "not committed" only makes the asker serve nothing.
      a.yes = 0;
    } else {
      later.emplace_back(from, version);  // not decided yet: answered once it is
      continue;
    }
    (void)internal::SendPod(g_.all, from, kGroupTagAnswer, a, options_.peer_timeout_s);
  }
  queries_ = std::move(later);
}

void ShardedSubscriber::Impl::EnterDoubt(const Incoming& in, std::shared_ptr<AlignedBuffer> buffer) {
  doubt_version_ = in.version;
  doubt_iteration_ = in.iteration;
  doubt_whole_ = in.whole;
  doubt_buffer_ = std::move(buffer);
  std::lock_guard<std::mutex> l(mu_);
  withheld_ = true;
}

void ShardedSubscriber::Impl::Settle(bool committed) {
  if (target_ != nullptr) {
    std::unique_lock<std::shared_mutex> l(serve_mu_);
    if (committed) {  // the target holds exactly that version (nothing copied into it since)
      bounded_.version = doubt_version_;
      bounded_.iteration = doubt_iteration_;
      bounded_.whole_checksum = doubt_whole_;
      bounded_.state = *target_;
      bounded_.state.metadata.version = doubt_version_;
      bounded_.state.metadata.iteration = doubt_iteration_;
      bounded_serving_ = true;
    }
  } else {
    if (committed) {
      Incoming in;
      in.version = doubt_version_;
      in.iteration = doubt_iteration_;
      in.whole = doubt_whole_;
      if (doubt_device_.owner) {
        InstallVersion(in, doubt_device_.owner, doubt_device_.data, MemoryKind::kDevice);
      } else {
        InstallDoubleBuffer(in, doubt_buffer_);
      }
    }
    std::lock_guard<std::mutex> l(mu_);
    withheld_ = false;
  }
  doubt_version_ = 0;
  doubt_buffer_.reset();
  doubt_device_ = {};
}

void ShardedSubscriber::Impl::Resolve(double wait_s, Summary* sum) {
  const uint64_t v = doubt_version_;
  auto wanted = [v](const VoteMsg& m) { return m.version == v; };
  VoteMsg d;
  // The decision itself, arrived late; else rank 0's answer.
  bool known = WaitPod<VoteMsg>(g_.all, g_.consumers[0], kGroupTagCommit, 0, &d, wanted);
  if (!known) {
    VoteMsg q;
    q.version = v;
    known =
        internal::SendPod(g_.all, g_.consumers[0], kGroupTagQuery, q, options_.peer_timeout_s).ok() &&
        WaitPod<VoteMsg>(g_.all, g_.consumers[0], kGroupTagAnswer, MonotonicSeconds() + wait_s, &d, wanted);
  }
  if (!known) return;
  sum->resolved_version = v;
  sum->resolved_committed = d.yes == 1;
  Settle(d.yes == 1);
}

}  // namespace transports
}  // namespace viper
