// CPU harness for plugins/cpp/replayssm_engine_plugins.cpp: NOT TensorRT, NOT CUDA.
//
// Compiled by tests/builders_trtllm_engine/test_engine_plugins_cpp.py with g++ against TensorRT
// 10's public headers (TRT_HEADERS_DIR) and the stand-in CUDA headers (plugins/cpp/stubs). It
// includes the plugin source and defines, on the host, the few functions a real build takes from
// libnvinfer (getPluginRegistry, getLogger: a recording registry and a printing logger) and from
// CUDA (copies are memcpy; cuLaunchKernel records its launch instead of running anything). It
// then drives the creators and plugins as TensorRT would call them and prints what happened, one
// fact a line, for the test to compare with the Python side (hook.py, mamba2_block_launch.py).
//
// Usage:
//   harness registry
//   harness create <plugin name> <fields file>        createPlugin (kBUILD), then serialize and
//                                                     createPlugin (kRUNTIME) from that
//   harness route <fields file> <phase> <rows>        Mamba2Route::enqueue, phase 0 context / 1 generation
//   harness block <fields file> <phase> <rows> <act> <xbc width> <zxbcdt width> <nheads> <y width>
// Fields file: one field a line, "<name> <char|int32|int64> <count> <values>", a char field's
// value as one hex string of <count> bytes (no NUL), as the build hook passes it.
#include "../../plugins/cpp/replayssm_engine_plugins.cpp"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

using namespace nvinfer1;

// ----------------------------------------------------------------------------- libnvinfer stand-ins
namespace
{
class PrintLogger : public ILogger
{
public:
    void log(Severity severity, AsciiChar const* msg) noexcept override
    {
        std::printf("log %d %s\n", static_cast<int>(severity), msg);
    }
};

// IPluginRegistry still declares the deprecated IPluginCreator (V2) overloads: overridden, unused.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
class RecordingRegistry : public IPluginRegistry
{
public:
    struct Entry
    {
        IPluginCreatorInterface* creator;
        std::string ns;
    };
    std::vector<Entry> entries;

    bool registerCreator(IPluginCreatorInterface& creator, AsciiChar const* const ns) noexcept override
    {
        entries.push_back({&creator, ns});
        return true;
    }
    IPluginCreatorInterface* getCreator(
        AsciiChar const* const name, AsciiChar const* const version, AsciiChar const* const ns) noexcept override
    {
        for (Entry const& e : entries)
        {
            auto* c = static_cast<IPluginCreatorV3One*>(e.creator);
            if (e.ns == ns && std::string(c->getPluginName()) == name && std::string(c->getPluginVersion()) == version)
                return e.creator;
        }
        return nullptr;
    }

    // Not used by the plugin library: fail loudly if it ever calls them.
    bool registerCreator(IPluginCreator&, AsciiChar const* const) noexcept override { return unexpected("registerCreator(V2)"); }
    IPluginCreator* const* getPluginCreatorList(int32_t* const) const noexcept override { return nullptr; }
    IPluginCreator* getPluginCreator(AsciiChar const* const, AsciiChar const* const, AsciiChar const* const) noexcept override
    {
        return nullptr;
    }
    void setErrorRecorder(IErrorRecorder* const) noexcept override {}
    IErrorRecorder* getErrorRecorder() const noexcept override { return nullptr; }
    bool deregisterCreator(IPluginCreator const&) noexcept override { return false; }
    bool isParentSearchEnabled() const override { return false; }
    void setParentSearchEnabled(bool const) override {}
    PluginLibraryHandle loadLibrary(AsciiChar const*) noexcept override { return nullptr; }
    void deregisterLibrary(PluginLibraryHandle) noexcept override {}
    IPluginCreatorInterface* const* getAllCreators(int32_t* const n) const noexcept override
    {
        *n = 0;
        return nullptr;
    }
    bool deregisterCreator(IPluginCreatorInterface const&) noexcept override { return false; }
    IPluginResource* acquirePluginResource(AsciiChar const*, IPluginResource*) noexcept override { return nullptr; }
    int32_t releasePluginResource(AsciiChar const*) noexcept override { return 0; }
    IPluginCreatorInterface* const* getAllCreatorsRecursive(int32_t* const n) noexcept override
    {
        *n = 0;
        return nullptr;
    }

private:
    static bool unexpected(char const* what)
    {
        std::printf("unexpected %s\n", what);
        return false;
    }
};
#pragma GCC diagnostic pop

RecordingRegistry& registry()
{
    static RecordingRegistry r;
    return r;
}
} // namespace

extern "C" nvinfer1::IPluginRegistry* getPluginRegistry() noexcept
{
    return &registry();
}
extern "C" nvinfer1::ILogger* getLogger() noexcept
{
    static PrintLogger logger;
    return &logger;
}

// ----------------------------------------------------------------------------- CUDA stand-ins
namespace
{
struct Launch
{
    bool done = false;
    unsigned grid[3]{}, block[3]{}, shared = 0;
    void** args = nullptr;
};
Launch gLaunch;
std::string gModuleImage, gFunctionName;
std::vector<int64_t> gTable; // the launch table of the block under test, to decode the arguments
std::vector<std::pair<std::string, std::pair<char const*, size_t>>> gBuffers; // name -> host bytes

std::string whereIs(void const* p)
{
    for (auto const& b : gBuffers)
    {
        char const* base = b.second.first;
        auto const* c = static_cast<char const*>(p);
        if (c >= base && c < base + b.second.second)
            return b.first + " " + std::to_string(c - base);
    }
    return "unknown 0";
}
} // namespace

extern "C"
{
    cudaError_t cudaMemcpyAsync(void* dst, void const* src, size_t count, cudaMemcpyKind, cudaStream_t)
    {
        std::memcpy(dst, src, count);
        return cudaSuccess;
    }
    cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
    cudaError_t cudaMallocHost(void** ptr, size_t size)
    {
        *ptr = std::malloc(size);
        return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
    }
    cudaError_t cudaFreeHost(void* ptr)
    {
        std::free(ptr);
        return cudaSuccess;
    }
    CUresult cuModuleLoadData(CUmodule* module, void const* image)
    {
        gModuleImage = static_cast<char const*>(image);
        *module = reinterpret_cast<CUmodule>(&gModuleImage);
        return CUDA_SUCCESS;
    }
    CUresult cuModuleGetFunction(CUfunction* f, CUmodule, char const* name)
    {
        gFunctionName = name;
        *f = reinterpret_cast<CUfunction>(&gFunctionName);
        return CUDA_SUCCESS;
    }
    CUresult cuModuleUnload(CUmodule) { return CUDA_SUCCESS; }
    CUresult cuLaunchKernel(CUfunction, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
        unsigned shared, CUstream, void** params, void**)
    {
        gLaunch = Launch{true, {gx, gy, gz}, {bx, by, bz}, shared, params};
        // decode now: the argument storage lives in enqueue's frame
        int64_t const n = gTable.at(0);
        for (int64_t i = 0; i < n; ++i)
        {
            int64_t const kind = gTable.at(1 + 3 * i);
            if (kind == replayssm::kInput || kind == replayssm::kState || kind == replayssm::kOutput)
                std::printf("arg %lld ptr %s\n", static_cast<long long>(i), whereIs(*static_cast<void**>(params[i])).c_str());
            else
                std::printf("arg %lld i32 %d\n", static_cast<long long>(i), *static_cast<int32_t*>(params[i]));
        }
        std::printf("launch grid %u %u %u block %u %u %u shared %u\n", gx, gy, gz, bx, by, bz, shared);
        return CUDA_SUCCESS;
    }
}

// ----------------------------------------------------------------------------- driver
namespace
{
struct OwnedFields
{
    std::vector<std::string> names;
    std::vector<std::vector<char>> data;
    std::vector<PluginField> fields;
    PluginFieldCollection fc{};
};

PluginFieldType kindType(std::string const& kind)
{
    if (kind == "char")
        return PluginFieldType::kCHAR;
    if (kind == "int32")
        return PluginFieldType::kINT32;
    if (kind == "int64")
        return PluginFieldType::kINT64;
    return PluginFieldType::kUNKNOWN;
}

bool readFields(char const* path, OwnedFields& out)
{
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line))
    {
        std::istringstream ls(line);
        std::string name, kind;
        int64_t count = 0;
        if (!(ls >> name >> kind >> count))
            continue;
        std::vector<char> bytes;
        if (kind == "char")
        {
            std::string hex;
            ls >> hex;
            for (size_t i = 0; i + 1 < hex.size(); i += 2)
                bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
        }
        else
        {
            for (int64_t i = 0; i < count; ++i)
            {
                long long v = 0;
                ls >> v;
                if (kind == "int32")
                {
                    auto const v32 = static_cast<int32_t>(v);
                    bytes.insert(bytes.end(), reinterpret_cast<char const*>(&v32), reinterpret_cast<char const*>(&v32) + 4);
                }
                else
                {
                    auto const v64 = static_cast<int64_t>(v);
                    bytes.insert(bytes.end(), reinterpret_cast<char const*>(&v64), reinterpret_cast<char const*>(&v64) + 8);
                }
            }
            if (kind == "int64" && name == "launch_table")
            {
                gTable.resize(static_cast<size_t>(count));
                std::memcpy(gTable.data(), bytes.data(), bytes.size());
            }
        }
        out.names.push_back(name);
        out.data.push_back(std::move(bytes));
        out.fields.emplace_back(nullptr, nullptr, kindType(kind), static_cast<int32_t>(count));
    }
    for (size_t i = 0; i < out.fields.size(); ++i)
    {
        out.fields[i].name = out.names[i].c_str();
        out.fields[i].data = out.data[i].empty() ? nullptr : out.data[i].data();
    }
    out.fc = {static_cast<int32_t>(out.fields.size()), out.fields.data()};
    return in.eof();
}

std::string fieldText(PluginField const& f)
{
    std::ostringstream os;
    os << f.name << " " << static_cast<int>(f.type) << " " << f.length;
    if (f.type == PluginFieldType::kCHAR)
    {
        char const* c = static_cast<char const*>(f.data);
        os << " ";
        for (int32_t i = 0; i < f.length; ++i)
        {
            char buf[3];
            std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned char>(c[i]));
            os << buf;
        }
    }
    else
        for (int32_t i = 0; i < f.length; ++i)
            os << " "
               << (f.type == PluginFieldType::kINT32 ? static_cast<int64_t>(static_cast<int32_t const*>(f.data)[i])
                                                     : static_cast<int64_t const*>(f.data)[i]);
    return os.str();
}

IPluginCreatorV3One* creator(char const* name)
{
    return static_cast<IPluginCreatorV3One*>(registry().getCreator(name, "1", "replayssm"));
}

IPluginV3* create(char const* name, OwnedFields const& f, TensorRTPhase phase)
{
    IPluginCreatorV3One* c = creator(name);
    if (c == nullptr)
    {
        std::printf("nocreator %s\n", name);
        return nullptr;
    }
    return c->createPlugin(name, &f.fc, phase);
}

PluginFieldCollection const* serialize(IPluginV3* p)
{
    auto* runtime = static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    return runtime->getFieldsToSerialize();
}

int cmdRegistry()
{
    for (auto const& e : registry().entries)
    {
        auto* c = static_cast<IPluginCreatorV3One*>(e.creator);
        InterfaceInfo const info = c->getInterfaceInfo();
        std::printf("registered %s %s %s %s %s\n", e.ns.c_str(), c->getPluginNamespace(), c->getPluginName(),
            c->getPluginVersion(), info.kind);
        PluginFieldCollection const* names = c->getFieldNames();
        for (int32_t i = 0; i < names->nbFields; ++i)
            std::printf("fieldname %s %s %d\n", c->getPluginName(), names->fields[i].name,
                static_cast<int>(names->fields[i].type));
    }
    return 0;
}

int cmdCreate(char const* name, char const* path)
{
    OwnedFields f;
    if (!readFields(path, f))
        return 2;
    IPluginV3* built = create(name, f, TensorRTPhase::kBUILD);
    if (built == nullptr)
    {
        std::printf("created null\n");
        return 0;
    }
    auto* core = static_cast<IPluginV3OneCore*>(built->getCapabilityInterface(PluginCapabilityType::kCORE));
    std::printf("created %s %s %s\n", core->getPluginNamespace(), core->getPluginName(), core->getPluginVersion());
    PluginFieldCollection const* s = serialize(built);
    std::vector<std::string> first;
    for (int32_t i = 0; i < s->nbFields; ++i)
    {
        first.push_back(fieldText(s->fields[i]));
        std::printf("serialized %s\n", first.back().c_str());
    }
    IPluginV3* runtime = creator(name)->createPlugin(name, s, TensorRTPhase::kRUNTIME);
    bool same = runtime != nullptr;
    if (same)
    {
        PluginFieldCollection const* s2 = serialize(runtime);
        same = s2->nbFields == s->nbFields;
        for (int32_t i = 0; same && i < s2->nbFields; ++i)
            same = fieldText(s2->fields[i]) == first[static_cast<size_t>(i)];
    }
    IPluginV3* cloned = built->clone();
    std::printf("roundtrip %s\n", same ? "same" : "differs");
    std::printf("clone %s\n", cloned != nullptr ? "ok" : "null");
    delete cloned;
    delete runtime;
    delete built;
    return 0;
}

PluginTensorDesc desc(DataType t, std::initializer_list<int64_t> dims)
{
    PluginTensorDesc d{};
    d.type = t;
    d.format = TensorFormat::kLINEAR;
    d.dims.nbDims = static_cast<int32_t>(dims.size());
    int32_t i = 0;
    for (int64_t v : dims)
        d.dims.d[i++] = v;
    return d;
}

int cmdRoute(char const* path, int32_t phase, int32_t rows)
{
    OwnedFields f;
    if (!readFields(path, f))
        return 2;
    IPluginV3* p = create("Mamba2Route", f, TensorRTPhase::kRUNTIME);
    if (p == nullptr)
        return 3;
    auto* rt = static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    std::vector<int32_t> types(static_cast<size_t>(rows), phase), slots(static_cast<size_t>(rows)), out(static_cast<size_t>(rows), -1);
    for (int32_t i = 0; i < rows; ++i)
        slots[static_cast<size_t>(i)] = 10 + i;
    PluginTensorDesc in[2] = {desc(DataType::kINT32, {rows}), desc(DataType::kINT32, {rows})};
    PluginTensorDesc o[1] = {desc(DataType::kINT32, {rows})};
    void const* ins[2] = {types.data(), slots.data()};
    void* outs[1] = {out.data()};
    int32_t const rc = rt->enqueue(in, o, ins, outs, nullptr, nullptr);
    std::printf("enqueue %d\nout", rc);
    for (int32_t v : out)
        std::printf(" %d", v);
    std::printf("\n");
    delete p;
    return 0;
}

int cmdBlock(char** argv)
{
    OwnedFields f;
    if (!readFields(argv[2], f))
        return 2;
    int32_t const phase = std::atoi(argv[3]);
    int64_t const rows = std::atoll(argv[4]);
    std::string const act = argv[5];
    int64_t const xbcW = std::atoll(argv[6]), zW = std::atoll(argv[7]), nheads = std::atoll(argv[8]),
                  yW = std::atoll(argv[9]);
    DataType const at = act == "f32" ? DataType::kFLOAT : act == "bf16" ? DataType::kBF16 : DataType::kHALF;
    size_t const es = act == "f32" ? 4 : 2;
    int64_t const tokens = phase == 0 ? rows + 2 : rows; // a context step: more tokens than rows

    IPluginV3* p = create("Mamba2ReplayBlock", f, TensorRTPhase::kRUNTIME);
    if (p == nullptr)
        return 3;
    auto* build = static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
    auto* rt = static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));

    int64_t statePtrValue = 0x7f0012345600;
    std::vector<int32_t> types(static_cast<size_t>(rows), phase), slots(static_cast<size_t>(rows), 3);
    std::vector<char> xbc(static_cast<size_t>(tokens * xbcW) * es), z(static_cast<size_t>(tokens * zW) * es);
    std::vector<float> a(static_cast<size_t>(nheads)), d(static_cast<size_t>(nheads)), dtb(static_cast<size_t>(nheads));
    std::vector<char> yStock(static_cast<size_t>(tokens * yW) * es), y(yStock.size(), 0);
    for (size_t i = 0; i < yStock.size(); ++i)
        yStock[i] = static_cast<char>(i * 7 + 1);
    int64_t workspace = 0;
    gBuffers = {{"in0", {reinterpret_cast<char const*>(&statePtrValue), 8}},
        {"in1", {reinterpret_cast<char const*>(types.data()), types.size() * 4}},
        {"in2", {reinterpret_cast<char const*>(slots.data()), slots.size() * 4}}, {"in3", {xbc.data(), xbc.size()}},
        {"in4", {z.data(), z.size()}}, {"in5", {reinterpret_cast<char const*>(a.data()), a.size() * 4}},
        {"in6", {reinterpret_cast<char const*>(d.data()), d.size() * 4}},
        {"in7", {reinterpret_cast<char const*>(dtb.data()), dtb.size() * 4}}, {"in8", {yStock.data(), yStock.size()}},
        {"out0", {y.data(), y.size()}}, {"ws", {reinterpret_cast<char const*>(&workspace), 8}}};

    PluginTensorDesc in[9] = {desc(DataType::kINT64, {1}), desc(DataType::kINT32, {rows}), desc(DataType::kINT32, {rows}),
        desc(at, {tokens, xbcW}), desc(at, {tokens, zW}), desc(DataType::kFLOAT, {nheads}),
        desc(DataType::kFLOAT, {nheads}), desc(DataType::kFLOAT, {nheads}), desc(at, {tokens, yW})};
    PluginTensorDesc o[1] = {desc(at, {tokens, yW})};
    void const* ins[9] = {&statePtrValue, types.data(), slots.data(), xbc.data(), z.data(), a.data(), d.data(), dtb.data(),
        yStock.data()};
    void* outs[1] = {y.data()};

    DynamicPluginTensorDesc dyn[10]{};
    for (int i = 0; i < 9; ++i)
        dyn[i].desc = in[i];
    dyn[9].desc = o[0];
    std::printf("configure %d\n", build->configurePlugin(dyn, 9, dyn + 9, 1));
    std::printf("configure_wrong %d\n", build->configurePlugin(dyn, 8, dyn + 9, 1));
    std::printf("workspace %zu\n", build->getWorkspaceSize(dyn, 9, dyn + 9, 1));
    std::string formats;
    for (int32_t pos = 0; pos < 10; ++pos)
        formats += build->supportsFormatCombination(pos, dyn, 9, 1) ? "1" : "0";
    std::printf("formats %s\n", formats.c_str());

    int32_t const rc = rt->enqueue(in, o, ins, outs, &workspace, nullptr);
    std::printf("enqueue %d\n", rc);
    std::string ptx;
    for (size_t i = 0; i < f.names.size(); ++i)
        if (f.names[i] == "ptx")
            ptx.assign(f.data[i].begin(), f.data[i].end());
    std::printf("module %s\nfunction %s\n", gModuleImage == ptx ? "ptx" : "other", gFunctionName.c_str());
    std::printf("staged %s\n", workspace == statePtrValue ? "rnn_state_ptr" : "other");
    std::printf("y %s\n", y == yStock ? "y_stock" : "untouched");
    delete p;
    return 0;
}
} // namespace

int main(int argc, char** argv)
{
    std::string const cmd = argc > 1 ? argv[1] : "";
    if (cmd == "registry")
        return cmdRegistry();
    if (cmd == "create" && argc == 4)
        return cmdCreate(argv[2], argv[3]);
    if (cmd == "route" && argc == 5)
        return cmdRoute(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    if (cmd == "block" && argc == 10)
        return cmdBlock(argv);
    std::fprintf(stderr, "usage: see the comment at the top of engine_plugins_harness.cpp\n");
    return 2;
}
