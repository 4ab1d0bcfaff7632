// TensorBoard event files: TFRecord framing and the few Event / Summary /
// TensorProto fields a scalar needs, decoded from the protobuf wire format by
// hand with a bounds check on every read.
//
// TFRecord: uint64 length (little-endian), uint32 masked CRC-32C of the
// length's 8 bytes, the data, uint32 masked CRC-32C of the data.
// Event: wall_time = 1 (double), step = 2 (int64), summary = 5.
// Summary: repeated Value value = 1. Value: tag = 1, simple_value = 2 (float),
// tensor = 8 (TensorProto), metadata = 9 (SummaryMetadata: plugin_data = 1 {
// plugin_name = 1 }). TensorProto: dtype = 1, tensor_shape = 2 (dim = 2 {
// size = 1 }), tensor_content = 4, float_val = 5, double_val = 6,
// int_val = 7, int64_val = 10, half_val = 13.
#include <cmath>
#include <cstring>
#include <string>

#include "log_rows.h"
#include "viper/datasets/log_reader.h"

namespace viper {
namespace datasets {
namespace {

const uint32_t* Crc32cTable() {
  static const auto* table = [] {
    auto* t = new uint32_t[256];
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (0x82F63B78u ^ (c >> 1)) : (c >> 1);
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint64_t LoadLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint32_t LoadLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// A protobuf message being read: every read checks the bounds.
class Wire {
 public:
  explicit Wire(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }

  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;  // more than 10 bytes
  }
  bool Fixed64(uint64_t* out) {
    if (data_.size() - pos_ < 8) return false;
    *out = LoadLe64(data_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool Fixed32(uint32_t* out) {
    if (data_.size() - pos_ < 4) return false;
    *out = LoadLe32(data_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool Bytes(std::string_view* out) {
    uint64_t n = 0;
    if (!Varint(&n) || n > data_.size() - pos_) return false;
    *out = data_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }
  // Reads a field key; false at a malformed key.
  bool Key(uint32_t* field, uint32_t* wire_type) {
    uint64_t k = 0;
    if (!Varint(&k) || (k >> 3) == 0 || (k >> 3) > 0x1FFFFFFF) return false;
    *field = static_cast<uint32_t>(k >> 3);
    *wire_type = static_cast<uint32_t>(k & 7);
    return true;
  }
  // Skips a field of `wire_type`; false if malformed or a (deprecated) group.
  bool Skip(uint32_t wire_type) {
    uint64_t u;
    uint32_t w;
    std::string_view b;
    switch (wire_type) {
      case 0: return Varint(&u);
      case 1: return Fixed64(&u);
      case 2: return Bytes(&b);
      case 5: return Fixed32(&w);
      default: return false;
    }
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

double BitsToDouble(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
// IEEE half precision to double.
double HalfToDouble(uint32_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
  double v;
  if (exp == 0) {
    v = std::ldexp(frac, -24);
  } else if (exp == 31) {
    v = frac ? std::nan("") : INFINITY;
  } else {
    v = std::ldexp(frac + 1024, exp - 25);
  }
  return sign ? -v : v;
}

enum DType : uint64_t { kFloat = 1, kDouble = 2, kInt32 = 3, kInt64 = 9, kHalf = 19 };

// A scalar tensor's value; nullopt when the tensor is not a one-element
// numeric tensor (histograms, images, text): such values are skipped.
// Returns false when the message is malformed.
bool DecodeTensor(std::string_view msg, std::optional<double>* out) {
  Wire w(msg);
  uint64_t dtype = 0;
  bool shape_ok = true;
  // Only the first value and the count are kept (a big tensor costs no memory).
  double first_value = 0;
  uint64_t count = 0;
  auto push = [&](double v) {
    if (count++ == 0) first_value = v;
  };
  std::string_view content;
  bool have_content = false;
  while (!w.done()) {
    uint32_t field, type;
    if (!w.Key(&field, &type)) return false;
    if (field == 1 && type == 0) {
      if (!w.Varint(&dtype)) return false;
    } else if (field == 2 && type == 2) {  // tensor_shape
      std::string_view shape;
      if (!w.Bytes(&shape)) return false;
      Wire s(shape);
      while (!s.done()) {
        uint32_t f2, t2;
        if (!s.Key(&f2, &t2)) return false;
        if (f2 == 2 && t2 == 2) {
          std::string_view dim;
          if (!s.Bytes(&dim)) return false;
          Wire d(dim);
          uint64_t size = 1;
          while (!d.done()) {
            uint32_t f3, t3;
            if (!d.Key(&f3, &t3)) return false;
            if (f3 == 1 && t3 == 0) {
              if (!d.Varint(&size)) return false;
            } else if (!d.Skip(t3)) {
              return false;
            }
          }
          if (size != 1) shape_ok = false;  // more than one element (or unknown)
        } else if (f2 == 3 && t2 == 0) {
          uint64_t unknown_rank = 0;
          if (!s.Varint(&unknown_rank)) return false;
          if (unknown_rank) shape_ok = false;
        } else if (!s.Skip(t2)) {
          return false;
        }
      }
    } else if (field == 4 && type == 2) {
      if (!w.Bytes(&content)) return false;
      have_content = true;
    } else if ((field == 5 && (type == 2 || type == 5)) || (field == 6 && (type == 2 || type == 1)) ||
               ((field == 7 || field == 10 || field == 13) && (type == 2 || type == 0))) {
      // Repeated numeric values, packed (type 2) or not.
      auto read_one = [&](Wire* src, uint32_t t) -> bool {
        if (t == 5) {
          uint32_t b;
          if (!src->Fixed32(&b)) return false;
          push(BitsToFloat(b));
        } else if (t == 1) {
          uint64_t b;
          if (!src->Fixed64(&b)) return false;
          push(BitsToDouble(b));
        } else {
          uint64_t v;
          if (!src->Varint(&v)) return false;
          if (field == 13) {
            push(HalfToDouble(static_cast<uint32_t>(v & 0xFFFF)));
          } else if (field == 7) {
            push(static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(v))));
          } else {
            push(static_cast<double>(static_cast<int64_t>(v)));
          }
        }
        return true;
      };
      if (type == 2) {
        std::string_view packed;
        if (!w.Bytes(&packed)) return false;
        const uint32_t elem = field == 5 ? 5 : field == 6 ? 1 : 0;
        Wire p(packed);
        while (!p.done()) {
          if (!read_one(&p, elem)) return false;
        }
      } else if (!read_one(&w, type)) {
        return false;
      }
    } else if (!w.Skip(type)) {
      return false;
    }
  }
  *out = std::nullopt;
  if (!shape_ok) return true;
  if (have_content) {
    if (dtype == kFloat && content.size() == 4) *out = BitsToFloat(LoadLe32(content.data()));
    if (dtype == kDouble && content.size() == 8) *out = BitsToDouble(LoadLe64(content.data()));
    if (dtype == kInt32 && content.size() == 4) *out = static_cast<int32_t>(LoadLe32(content.data()));
    if (dtype == kInt64 && content.size() == 8) *out = static_cast<double>(static_cast<int64_t>(LoadLe64(content.data())));
    if (dtype == kHalf && content.size() == 2) {
      *out = HalfToDouble(static_cast<unsigned char>(content[0]) | (static_cast<unsigned char>(content[1]) << 8));
    }
    return true;
  }
  if (count == 1 && (dtype == kFloat || dtype == kDouble || dtype == kInt32 || dtype == kInt64 ||
                             dtype == kHalf)) {
    *out = first_value;
  }
  return true;
}

// Plugin name in a SummaryMetadata; empty when absent.
bool DecodePluginName(std::string_view msg, std::string* name) {
  Wire w(msg);
  while (!w.done()) {
    uint32_t field, type;
    if (!w.Key(&field, &type)) return false;
    if (field == 1 && type == 2) {
      std::string_view plugin;
      if (!w.Bytes(&plugin)) return false;
      Wire p(plugin);
      while (!p.done()) {
        uint32_t f, t;
        if (!p.Key(&f, &t)) return false;
        if (f == 1 && t == 2) {
          std::string_view n;
          if (!p.Bytes(&n)) return false;
          *name = std::string(n);
        } else if (!p.Skip(t)) {
          return false;
        }
      }
    } else if (!w.Skip(type)) {
      return false;
    }
  }
  return true;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t size) {
  const uint32_t* table = Crc32cTable();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t MaskedCrc32c(const void* data, size_t size) {
  const uint32_t c = Crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

namespace internal {

bool LooksLikeTfRecord(std::string_view data) {
  if (data.size() < 12) return false;
  return MaskedCrc32c(data.data(), 8) == LoadLe32(data.data() + 8);
}

Status ForEachTfScalar(std::string_view data, const std::string& source, int64_t max_records,
                       const std::function<Status(const TfScalar&)>& visit) {
  size_t pos = 0;
  int64_t record = 0;
  while (pos < data.size()) {
    ++record;
    const std::string where = source + ": record " + std::to_string(record) + " (byte offset " +
                              std::to_string(pos) + ")";
    if (record > max_records) {
      return OutOfRangeError(source + ": more than " + std::to_string(max_records) +
                             " records (the limit on rows; raise it with --max-rows)");
    }
    if (data.size() - pos < 12) {
      return DataLossError(where + ": truncated record header (" + std::to_string(data.size() - pos) +
                           " bytes left, expected 12); is the event file cut short?");
    }
    const char* h = data.data() + pos;
    const uint64_t length = LoadLe64(h);
    if (MaskedCrc32c(h, 8) != LoadLe32(h + 8)) {
      return DataLossError(where + ": the length's CRC-32C does not match (not a TFRecord / TensorBoard event "
                           "file, or a corrupt one)");
    }
    if (length > data.size() - pos - 12 || data.size() - pos - 12 - length < 4) {
      return DataLossError(where + ": record of " + std::to_string(length) + " bytes runs past the end of the file (" +
                           std::to_string(data.size() - pos - 12) + " bytes left); is the event file cut short?");
    }
    const std::string_view payload = data.substr(pos + 12, static_cast<size_t>(length));
    if (MaskedCrc32c(payload.data(), payload.size()) != LoadLe32(h + 12 + length)) {
      return DataLossError(where + ": the data's CRC-32C does not match (corrupt event file)");
    }
    const uint64_t offset = pos;
    pos += 12 + static_cast<size_t>(length) + 4;

    // Event.
    Wire ev(payload);
    TfScalar s;
    s.record = record;
    s.offset = offset;
    std::vector<std::string_view> summaries;
    auto malformed = [&](const char* what) {
      return DataLossError(where + ": malformed Event protobuf (" + what + ")");
    };
    while (!ev.done()) {
      uint32_t field, type;
      if (!ev.Key(&field, &type)) return malformed("bad field key");
      if (field == 1 && type == 1) {
        uint64_t bits;
        if (!ev.Fixed64(&bits)) return malformed("wall_time");
        s.wall_time = BitsToDouble(bits);
      } else if (field == 2 && type == 0) {
        uint64_t step;
        if (!ev.Varint(&step)) return malformed("step");
        s.step = static_cast<int64_t>(step);
      } else if (field == 5 && type == 2) {
        std::string_view summary;
        if (!ev.Bytes(&summary)) return malformed("summary");
        summaries.push_back(summary);
      } else if (!ev.Skip(type)) {
        return malformed("unreadable field");
      }
    }
    for (std::string_view summary : summaries) {
      Wire sw(summary);
      while (!sw.done()) {
        uint32_t field, type;
        if (!sw.Key(&field, &type)) return malformed("Summary field key");
        if (!(field == 1 && type == 2)) {
          if (!sw.Skip(type)) return malformed("Summary field");
          continue;
        }
        std::string_view value;
        if (!sw.Bytes(&value)) return malformed("Summary.value");
        Wire vw(value);
        std::string tag, plugin;
        std::optional<double> v;
        while (!vw.done()) {
          uint32_t f, t;
          if (!vw.Key(&f, &t)) return malformed("Summary.Value field key");
          if (f == 1 && t == 2) {
            std::string_view tg;
            if (!vw.Bytes(&tg)) return malformed("Summary.Value.tag");
            tag = std::string(tg);
          } else if (f == 2 && t == 5) {
            uint32_t bits;
            if (!vw.Fixed32(&bits)) return malformed("simple_value");
            v = BitsToFloat(bits);
          } else if (f == 8 && t == 2) {
            std::string_view tensor;
            if (!vw.Bytes(&tensor)) return malformed("Summary.Value.tensor");
            if (!DecodeTensor(tensor, &v)) return malformed("TensorProto");
          } else if (f == 9 && t == 2) {
            std::string_view meta;
            if (!vw.Bytes(&meta)) return malformed("Summary.Value.metadata");
            if (!DecodePluginName(meta, &plugin)) return malformed("SummaryMetadata");
          } else if (!vw.Skip(t)) {
            return malformed("Summary.Value field");
          }
        }
        // Only the scalars plugin's values (or untagged-plugin simple values).
        if (!v || tag.empty() || (!plugin.empty() && plugin != "scalars")) continue;
        s.tag = std::move(tag);
        s.value = *v;
        VIPER_RETURN_IF_ERROR(visit(s));
      }
    }
  }
  return Status::Ok();
}

// The scalars of an event file as a TrainingLog, through the shared Builder.
StatusOr<TrainingLog> ParseTfEvents(std::string_view data, const std::string& source,
                                    const LogReader::Options& options) {
  if (data.empty()) return InvalidArgumentError(source + ": the event file is empty");
  // Pass 1: the scalar tags.
  Columns cols;
  cols.kind = "tag";
  VIPER_RETURN_IF_ERROR(internal::ForEachTfScalar(data, source, options.max_rows, [&](const internal::TfScalar& s) {
    if (cols.names.size() < 100000) cols.Add(s.tag);
    return Status::Ok();
  }));
  if (cols.names.empty()) {
    return InvalidArgumentError(source + ": the event file holds no scalar values (expected scalars logged with "
                                "add_scalar / tf.summary.scalar)");
  }
  const auto names = NamesFor(LogFormat::kTfEvents, source);
  VIPER_ASSIGN_OR_RETURN(Selection sel, Select(cols, names, Overrides(options, LogFormat::kTfEvents), source,
                                               LogFormat::kTfEvents));
  sel[kIteration] = sel[kWallTime] = -1;  // from the Event itself, not tags
  // A tag must not serve twice.
  Columns step_cols = cols;
  const int step_col = step_cols.Add("step");
  Selection check = sel;
  check[kIteration] = step_col;
  VIPER_RETURN_IF_ERROR(CheckSelection(check, step_cols, names, source, LogFormat::kTfEvents));

  // Pass 2: the selected tags' values by step.
  struct Step {
    Values v;
    int64_t record = 0;
    std::array<int64_t, kNumFields> from{};
  };
  std::map<int64_t, Step> steps;
  // A tag's step going back (or repeating) is a restarted run: TensorBoard
  // purges that tag's values at that step and after it (the orphaned
  // continuation) and keeps the rest; so does this reader.
  std::array<int64_t, kNumFields> last_step;
  last_step.fill(-1);
  TrainingLog counts;
  VIPER_RETURN_IF_ERROR(internal::ForEachTfScalar(data, source, options.max_rows, [&](const internal::TfScalar& s) {
    int field = -1;
    const int c = cols.Find(s.tag);
    for (int f = 0; f < kNumFields; ++f) {
      if (sel[f] >= 0 && sel[f] == c) field = f;
    }
    if (field < 0) return Status::Ok();
    const std::string where = source + ": record " + std::to_string(s.record);
    if (s.step < 0) {
      return InvalidArgumentError(where + ": tag " + Excerpt(s.tag, 40) + ": step " + std::to_string(s.step) +
                                  " is negative");
    }
    if (s.step > kMaxLogIteration) {
      return InvalidArgumentError(where + ": tag " + Excerpt(s.tag, 40) + ": step " + std::to_string(s.step) +
                                  " is out of range (expected 0.." + std::to_string(kMaxLogIteration) + ")");
    }
    if (s.step <= last_step[field]) {
      ++counts.restarts;
      for (auto it = steps.lower_bound(s.step); it != steps.end();) {
        Step& old = it->second;
        if (old.v[field]) {
          old.v[field].reset();
          ++counts.discarded_orphaned_rows;
        }
        bool any = false;
        for (int f = 0; f < kNumFields; ++f) any = any || (f != kWallTime && f != kIteration && old.v[f]);
        it = any ? std::next(it) : steps.erase(it);
      }
    }
    last_step[field] = s.step;
    if (!steps.count(s.step) && static_cast<int64_t>(steps.size()) >= options.max_rows) {
      return OutOfRangeError(where + ": more than " + std::to_string(options.max_rows) +
                             " steps (the limit on rows; raise it with --max-rows)");
    }
    Step& st = steps[s.step];
    st.v[field] = s.value;
    st.from[field] = s.record;
    if (st.record == 0) {
      st.record = s.record;
      st.v[kWallTime] = s.wall_time;
    }
    return Status::Ok();
  }));
  Selection spec_sel = sel;
  Columns spec_cols = cols;
  spec_sel[kWallTime] = spec_cols.Add("wall_time");
  spec_sel[kIteration] = spec_cols.Add("step");
  BuildSpec spec = MakeSpec(LogFormat::kTfEvents, spec_sel, spec_cols, options);
  spec.row_word = "record";
  Builder builder(source, options, std::move(spec));
  for (auto& [step, st] : steps) {
    st.v[kIteration] = static_cast<double>(step);
    VIPER_RETURN_IF_ERROR(builder.Add(st.v, source + ": record " + std::to_string(st.record), st.record));
  }
  VIPER_ASSIGN_OR_RETURN(TrainingLog log, builder.Finish());
  log.discarded_orphaned_rows = counts.discarded_orphaned_rows;
  log.restarts = counts.restarts;
  return log;
}

}  // namespace internal
}  // namespace datasets
}  // namespace viper
