// Lower envelopes of lines for the schedule DPs (internal to schedulers/).
//
// Both structures answer min_i (m_i * x + b_i) over the lines inserted so
// far. The DPs query at x = U(j), which never decreases, and that is what
// QueryHull relies on; LiChao works for any query order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace viper {
namespace schedulers {
namespace internal {

// Li Chao tree over the points xs[0..n): O(log n) insert and query, any
// order. Nodes use the compact (l + r) | (l != r) numbering (2n slots) and
// hold a line's slope, intercept and id together (one cache line per visit).
class LiChao {
 public:
  // Empties the tree and sets its points (the first n of xs; xs must outlive it).
  void Reset(const double* xs, int64_t n) {
    xs_ = xs;
    n_ = n;
    const size_t slots = 2 * static_cast<size_t>(std::max<int64_t>(n, 1)) + 1;
    if (nodes_.size() < slots) nodes_.resize(slots);
    for (size_t s = 0; s < slots; ++s) nodes_[s].id = -1;
  }

  void Insert(double m, double b, int64_t id) {
    int64_t l = 0, r = n_ - 1;
    while (true) {
      Node& node = nodes_[static_cast<size_t>((l + r) | (l != r ? 1 : 0))];
      if (node.id < 0) {
        node = {m, b, id};
        return;
      }
      const int64_t mid = (l + r) / 2;
      const bool left_better = m * xs_[l] + b < node.m * xs_[l] + node.b;
      const bool mid_better = m * xs_[mid] + b < node.m * xs_[mid] + node.b;
      if (mid_better) {
        std::swap(m, node.m);
        std::swap(b, node.b);
        std::swap(id, node.id);
      }
      if (l == r) return;
      if (left_better != mid_better) {
        r = mid;
      } else {
        l = mid + 1;
      }
    }
  }

  // (min value, line id) at point idx; id -1 when empty.
  std::pair<double, int64_t> Query(int64_t idx) const {
    double best = std::numeric_limits<double>::infinity();
    int64_t best_id = -1;
    int64_t l = 0, r = n_ - 1;
    const double x = xs_[idx];
    while (true) {
      const Node& node = nodes_[static_cast<size_t>((l + r) | (l != r ? 1 : 0))];
      if (node.id >= 0) {
        const double y = node.m * x + node.b;
        if (y < best) {
          best = y;
          best_id = node.id;
        }
      }
      if (l == r) break;
      const int64_t mid = (l + r) / 2;
      if (idx <= mid) {
        r = mid;
      } else {
        l = mid + 1;
      }
    }
    return {best, best_id};
  }

 private:
  struct Node {
    double m, b;
    int64_t id;
  };
  const double* xs_ = nullptr;
  int64_t n_ = 0;
  std::vector<Node> nodes_;
};

// The lower envelope over [x, +inf) for queries at non-decreasing x: the
// lines that are on it, sorted by decreasing slope in one array (a line
// whose slope is the smallest so far is appended, as in the monotone convex
// hull trick; another one is inserted in place). Queries advance a head
// index, so each line is dropped at most once.
//
// Why lines can be dropped for good: once line p (slope m_p) is not below
// line q (m_q <= m_p) at x, it is not below q at any x' >= x. So on
// insertion at x a line that is not below the envelope at x and has the
// largest slope is never needed; a line between two others is needed iff
// it is below both at their crossing (the usual hull test); and the head
// moves on when the next line is no worse at the query point.
//
// A curve with non-monotone slopes can make in-place insertions move many
// lines; `moved()` counts them so the caller can switch to a Li Chao tree
// (the envelope is then handed over by ForEach) when that work grows.
class QueryHull {
 public:
  void Reset(int64_t capacity) {
    const size_t cap = static_cast<size_t>(capacity) + 2;
    if (m_.size() < cap) {
      m_.resize(cap);
      b_.resize(cap);
      id_.resize(cap);
    }
    head_ = tail_ = 1;  // one free slot in front for the first push_front
    moved_ = 0;
  }
  int64_t size() const { return tail_ - head_; }
  int64_t moved() const { return moved_; }

  // Adds y = m*x + b (id >= 0); the next query is at x >= `x_now`.
  void Insert(double m, double b, int64_t id, double x_now) {
    if (tail_ == head_ || m < m_[tail_ - 1]) {
      PushBack(m, b, id);
      return;
    }
    // Position: the first line with slope <= m (slopes decrease from head_).
    int64_t pos = std::lower_bound(m_.begin() + head_, m_.begin() + tail_, m, std::greater<double>()) - m_.begin();
    if (m_[pos] == m) {
      // A parallel twin: keep the lower one (it is needed wherever the other was).
      if (b_[pos] <= b) return;
      b_[pos] = b;
      id_[pos] = id;
    } else if (pos == head_) {
      // The largest slope: needed only if it is below the head's line at x_now.
      if (m * x_now + b >= m_[head_] * x_now + b_[head_]) return;
      InsertAt(pos, m, b, id);
      pos = head_;
    } else {
      if (!Needed(m_[pos - 1], b_[pos - 1], m, b, m_[pos], b_[pos])) return;
      InsertAt(pos, m, b, id);
    }
    // Drop neighbours the new line makes redundant.
    while (pos + 2 < tail_ && !Needed(m_[pos], b_[pos], m_[pos + 1], b_[pos + 1], m_[pos + 2], b_[pos + 2])) {
      Erase(pos + 1);
    }
    while (pos - 2 >= head_ && !Needed(m_[pos - 2], b_[pos - 2], m_[pos - 1], b_[pos - 1], m_[pos], b_[pos])) {
      Erase(pos - 1);
      --pos;
    }
  }

  // (min value, id) at x (x never decreases between calls); id -1 when empty.
  std::pair<double, int64_t> Query(double x) {
    if (head_ == tail_) return {std::numeric_limits<double>::infinity(), -1};
    while (tail_ - head_ >= 2 && m_[head_ + 1] * x + b_[head_ + 1] <= m_[head_] * x + b_[head_]) ++head_;
    return {m_[head_] * x + b_[head_], id_[head_]};
  }

  template <typename F>
  void ForEach(F&& f) const {
    for (int64_t i = head_; i < tail_; ++i) f(m_[i], b_[i], id_[i]);
  }

 private:
  // Line (m, b) between line a (larger slope) and line c (smaller slope) is
  // on the envelope iff it crosses a before it crosses c.
  static bool Needed(double ma, double ba, double m, double b, double mc, double bc) {
    return (b - ba) * (m - mc) < (bc - b) * (ma - m);
  }

  void PushBack(double m, double b, int64_t id) {
    while (tail_ - head_ >= 2 &&
           !Needed(m_[tail_ - 2], b_[tail_ - 2], m_[tail_ - 1], b_[tail_ - 1], m, b)) {
      --tail_;
    }
    m_[tail_] = m;
    b_[tail_] = b;
    id_[tail_] = id;
    ++tail_;
  }
  void InsertAt(int64_t pos, double m, double b, int64_t id) {
    if (pos == head_ && head_ > 0) {
      --head_;
      pos = head_;
    } else {
      const size_t count = static_cast<size_t>(tail_ - pos);
      std::memmove(&m_[pos + 1], &m_[pos], count * sizeof(double));
      std::memmove(&b_[pos + 1], &b_[pos], count * sizeof(double));
      std::memmove(&id_[pos + 1], &id_[pos], count * sizeof(int64_t));
      moved_ += static_cast<int64_t>(count);
      ++tail_;
    }
    m_[pos] = m;
    b_[pos] = b;
    id_[pos] = id;
  }
  void Erase(int64_t pos) {
    if (pos == head_) {
      ++head_;
      return;
    }
    const size_t count = static_cast<size_t>(tail_ - pos - 1);
    std::memmove(&m_[pos], &m_[pos + 1], count * sizeof(double));
    std::memmove(&b_[pos], &b_[pos + 1], count * sizeof(double));
    std::memmove(&id_[pos], &id_[pos + 1], count * sizeof(int64_t));
    moved_ += static_cast<int64_t>(count);
    --tail_;
  }

  std::vector<double> m_, b_;
  std::vector<int64_t> id_;
  int64_t head_ = 1, tail_ = 1;
  int64_t moved_ = 0;
};

}  // namespace internal
}  // namespace schedulers
}  // namespace viper
