// ReplaySSM engine plugins for TensorRT-LLM v1.2.1's engine flow (docs/engine_flow.md).
// NOT BUILT AS A LIBRARY OR RUN ON A GPU HERE. Checked with g++ 12 against TensorRT 10.13.3's public
// headers (the TensorRT of TensorRT-LLM 1.2.x) and stand-in CUDA headers (stubs/): -fsyntax-only,
// and a CPU harness that runs the creators, registration and enqueue logic on host stand-ins for
// libnvinfer and CUDA (tests/builders_trtllm_engine/test_engine_plugins_cpp.py). Never compiled
// against the CUDA toolkit's headers, linked with libnvinfer / libcuda, or loaded by TensorRT.
//
// Why C++: TensorRT 10 has no host-located plugin inputs (ITensor::setLocation is deprecated, the
// location must be kDEVICE), and TensorRT-LLM binds rnn_state_ptr_<i> (the layer buffer's address)
// and host_request_types to pageable host memory that its own plugins read on the CPU in enqueue.
// A TensorRT AOT (QDP) plugin only launches a kernel, which cannot read pageable host memory.
//
// replayssm::Mamba2Route (inputs: host_request_types [rows] host i32, slot_mapping [rows] i32;
//   output: slot_mapping for the stock selective_scan). Context step: a copy. Generation step:
//   every row -> the scratch slot, so the stock plugin's state update lands where nothing reads.
// replayssm::Mamba2ReplayBlock (inputs: ENGINE_INPUTS of plugins/mamba2_block_launch.py; output:
//   y [tokens, nheads * head_dim]). Context: the stock plugin has written each row's state at its
//   slot; the exported PTX admits it (transpose, cursor 0); y = y_stock (copied). Generation: the
//   PTX runs the replay step and writes y.
//
// The PTX, its kernel name, its shared memory and the launch table (plugins/mamba2_block_launch.py: LaunchTable.flat)
// are plugin fields, serialized with the engine. In TensorRT-LLM's builder, enqueue returns at once
// while IS_BUILDING=1 (TensorRT-LLM's own plugins do the same: the host inputs are not bound then).
//
// Fields: each plugin's getFieldsToSerialize, its creator's getFieldNames and createPlugin use the
// names, types and order of builders/trtllm_engine/hook.py (route_plugin_fields,
// block_plugin_fields); a test parses this file and compares them.
//
// Registration: on load. The library registers both creators with TensorRT's plugin registry
// (getPluginRegistry()->registerCreator, namespace "replayssm") from a static initializer, so that
// dlopen (the build hook: builders/trtllm_engine/adapter.py load_plugin_library) and LD_PRELOAD
// (Triton, the C++ runtime) both make the creators available before an engine is built or
// deserialized. It exports no getCreators / setLoggerFinder entry points, so load it with dlopen,
// not IPluginRegistry::loadLibrary / trtexec --dynamicPlugins (with those entry points,
// loadLibrary would find the creators registered already by the initializer, and fail).
#include <NvInferRuntime.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace replayssm
{
using namespace nvinfer1;

namespace
{
constexpr char const* kNamespace = "replayssm";
constexpr char const* kRouteName = "Mamba2Route";
constexpr char const* kRouteVersion = "1";
constexpr char const* kBlockName = "Mamba2ReplayBlock";
constexpr char const* kBlockVersion = "1";
constexpr int32_t kContext = 0; // TensorRT-LLM RequestType::kCONTEXT
constexpr int32_t kRouteInputs = 2;  // host_request_types, slot_mapping
constexpr int32_t kBlockInputs = 9;  // ENGINE_INPUTS of plugins/mamba2_block_launch.py
constexpr int32_t kMaxSharedBytes = 48 * 1024; // plugins/ptx.py MAX_SHARED_MEM: no attribute call

enum ArgKind : int64_t
{
    kInput = 0,
    kState = 1,
    kOutput = 2,
    kConst = 3,
    kRows = 4,
    kPhase = 5
};

bool isBuilding()
{
    char const* v = std::getenv("IS_BUILDING");
    return v != nullptr && std::string(v) == "1";
}

size_t elementSize(DataType t)
{
    switch (t)
    {
    case DataType::kFLOAT:
    case DataType::kINT32: return 4;
    case DataType::kHALF:
    case DataType::kBF16: return 2;
    case DataType::kINT64: return 8;
    default: return 0;
    }
}

// Logs through TensorRT's global logger (the library has no builder or runtime of its own).
void logError(std::string const& message) noexcept
{
    try
    {
        if (ILogger* logger = ::getLogger())
            logger->log(ILogger::Severity::kERROR, (std::string(kNamespace) + "::" + message).c_str());
    }
    catch (...)
    {
    }
}

char const* fieldTypeName(PluginFieldType t)
{
    switch (t)
    {
    case PluginFieldType::kINT32: return "int32";
    case PluginFieldType::kINT64: return "int64";
    case PluginFieldType::kCHAR: return "char";
    default: return "another type";
    }
}

// createPlugin's view of a PluginFieldCollection: every field named once, no field it does not
// expect, each of the expected type with at least the expected number of values. Errors are
// logged, naming the plugin, the field, what was expected and what was given.
class FieldReader
{
public:
    FieldReader(char const* plugin, PluginFieldCollection const* fc)
        : mPlugin(plugin)
        , mFc(fc)
    {
    }

    // The field `name`, or nullptr (error logged).
    PluginField const* get(char const* name, PluginFieldType type, int32_t minLength)
    {
        if (mFc == nullptr || mFc->nbFields < 0 || (mFc->nbFields > 0 && mFc->fields == nullptr))
            return fail(std::string("the field collection is empty or malformed; expected field ") + name);
        PluginField const* found = nullptr;
        for (int32_t i = 0; i < mFc->nbFields; ++i)
        {
            PluginField const& f = mFc->fields[i];
            if (f.name == nullptr || std::strcmp(f.name, name) != 0)
                continue;
            if (found != nullptr)
                return fail(std::string("field ") + name + " is given twice; expected once");
            found = &f;
        }
        if (found == nullptr)
            return fail(std::string("field ") + name + " is missing");
        if (found->type != type)
            return fail(std::string("field ") + name + " has type " + fieldTypeName(found->type) + "; expected "
                + fieldTypeName(type));
        if (found->length < minLength || (found->length > 0 && found->data == nullptr))
            return fail(std::string("field ") + name + " has " + std::to_string(found->length) + " values; expected at least "
                + std::to_string(minLength));
        return found;
    }

    // False (error logged) when the collection has a field not in `names`.
    bool onlyFields(std::vector<char const*> const& names)
    {
        for (int32_t i = 0; mFc != nullptr && i < mFc->nbFields; ++i)
        {
            char const* n = mFc->fields[i].name;
            bool known = false;
            for (char const* want : names)
                known = known || (n != nullptr && std::strcmp(n, want) == 0);
            if (!known)
            {
                fail(std::string("field ") + (n != nullptr ? n : "(unnamed)") + " is not one of this plugin's fields");
                return false;
            }
        }
        return true;
    }

    std::nullptr_t fail(std::string const& why)
    {
        logError(std::string(mPlugin) + " createPlugin: " + why);
        return nullptr;
    }

private:
    char const* mPlugin;
    PluginFieldCollection const* mFc;
};

// A kCHAR field as a string; trailing NUL bytes (a caller that terminates the string) dropped.
std::string fieldString(PluginField const& f)
{
    std::string out(static_cast<char const*>(f.data), static_cast<size_t>(f.length));
    while (!out.empty() && out.back() == '\0')
        out.pop_back();
    return out;
}
} // namespace

// ----------------------------------------------------------------------------- Mamba2Route
class Mamba2Route : public IPluginV3, public IPluginV3OneCore, public IPluginV3OneBuild, public IPluginV3OneRuntime
{
public:
    explicit Mamba2Route(int32_t scratchSlot)
        : mScratch(scratchSlot)
    {
    }

    IPluginCapability* getCapabilityInterface(PluginCapabilityType type) noexcept override
    {
        if (type == PluginCapabilityType::kBUILD)
            return static_cast<IPluginV3OneBuild*>(this);
        if (type == PluginCapabilityType::kRUNTIME)
            return static_cast<IPluginV3OneRuntime*>(this);
        return static_cast<IPluginV3OneCore*>(this);
    }
    IPluginV3* clone() noexcept override { return new Mamba2Route(mScratch); }
    char const* getPluginName() const noexcept override { return kRouteName; }
    char const* getPluginVersion() const noexcept override { return kRouteVersion; }
    char const* getPluginNamespace() const noexcept override { return kNamespace; }

    int32_t getNbOutputs() const noexcept override { return 1; }
    int32_t getOutputDataTypes(DataType* out, int32_t, DataType const*, int32_t) const noexcept override
    {
        out[0] = DataType::kINT32;
        return 0;
    }
    int32_t getOutputShapes(DimsExprs const* in, int32_t, DimsExprs const*, int32_t, DimsExprs* out, int32_t,
        IExprBuilder&) noexcept override
    {
        out[0] = in[1];
        return 0;
    }
    bool supportsFormatCombination(int32_t pos, DynamicPluginTensorDesc const* io, int32_t, int32_t) noexcept override
    {
        return io[pos].desc.type == DataType::kINT32 && io[pos].desc.format == TensorFormat::kLINEAR;
    }
    int32_t configurePlugin(DynamicPluginTensorDesc const*, int32_t nbInputs, DynamicPluginTensorDesc const*, int32_t nbOutputs) noexcept override
    {
        if (nbInputs == kRouteInputs && nbOutputs == 1)
            return 0;
        logError(std::string(kRouteName) + ": " + std::to_string(nbInputs) + " inputs and " + std::to_string(nbOutputs)
            + " outputs; expected 2 (host_request_types, slot_mapping) and 1");
        return 1;
    }
    size_t getWorkspaceSize(DynamicPluginTensorDesc const*, int32_t, DynamicPluginTensorDesc const*, int32_t) const noexcept override
    {
        return 0;
    }

    int32_t enqueue(PluginTensorDesc const* inDesc, PluginTensorDesc const*, void const* const* in, void* const* out,
        void*, cudaStream_t stream) noexcept override
    {
        if (isBuilding())
            return 0;
        int32_t const rows = static_cast<int32_t>(inDesc[1].dims.d[0]);
        auto const* requestTypes = static_cast<int32_t const*>(in[0]); // host memory
        if (rows == 0)
            return 0;
        if (requestTypes[0] == kContext)
            return cudaMemcpyAsync(out[0], in[1], rows * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream) != cudaSuccess;
        // every row -> scratch: a byte pattern only works for 0, so fill from a host staging copy
        mFill.assign(rows, mScratch);
        return cudaMemcpyAsync(out[0], mFill.data(), rows * sizeof(int32_t), cudaMemcpyHostToDevice, stream) != cudaSuccess
            || cudaStreamSynchronize(stream) != cudaSuccess; // mFill must outlive the copy
    }

    int32_t onShapeChange(PluginTensorDesc const*, int32_t, PluginTensorDesc const*, int32_t) noexcept override { return 0; }
    IPluginV3* attachToContext(IPluginResourceContext*) noexcept override { return clone(); }
    PluginFieldCollection const* getFieldsToSerialize() noexcept override
    {
        mFields = {PluginField("scratch_slot", &mScratch, PluginFieldType::kINT32, 1)};
        mFC = {static_cast<int32_t>(mFields.size()), mFields.data()};
        return &mFC;
    }

private:
    int32_t mScratch;
    std::vector<int32_t> mFill;
    std::vector<PluginField> mFields;
    PluginFieldCollection mFC{};
};

// ----------------------------------------------------------------------------- Mamba2ReplayBlock
class Mamba2ReplayBlock : public IPluginV3, public IPluginV3OneCore, public IPluginV3OneBuild, public IPluginV3OneRuntime
{
public:
    // sharedBytes: the export's dynamic shared memory (plugins/ptx.py CompiledPTX.shared_mem, <= 48 KiB).
    Mamba2ReplayBlock(std::string ptx, std::string kernelName, std::vector<int64_t> table, int32_t sharedBytes)
        : mPtx(std::move(ptx))
        , mKernelName(std::move(kernelName))
        , mTable(std::move(table))
        , mSharedBytes(static_cast<unsigned>(sharedBytes))
    {
    }
    ~Mamba2ReplayBlock() override
    {
        if (mModule != nullptr)
            cuModuleUnload(mModule);
        if (mStateHost != nullptr)
            cudaFreeHost(mStateHost);
    }

    IPluginCapability* getCapabilityInterface(PluginCapabilityType type) noexcept override
    {
        if (type == PluginCapabilityType::kBUILD)
            return static_cast<IPluginV3OneBuild*>(this);
        if (type == PluginCapabilityType::kRUNTIME)
            return static_cast<IPluginV3OneRuntime*>(this);
        return static_cast<IPluginV3OneCore*>(this);
    }
    IPluginV3* clone() noexcept override { return new Mamba2ReplayBlock(mPtx, mKernelName, mTable, static_cast<int32_t>(mSharedBytes)); }
    char const* getPluginName() const noexcept override { return kBlockName; }
    char const* getPluginVersion() const noexcept override { return kBlockVersion; }
    char const* getPluginNamespace() const noexcept override { return kNamespace; }

    int32_t getNbOutputs() const noexcept override { return 1; }
    int32_t getOutputDataTypes(DataType* out, int32_t, DataType const* in, int32_t) const noexcept override
    {
        out[0] = in[8]; // like y_stock
        return 0;
    }
    int32_t getOutputShapes(DimsExprs const* in, int32_t, DimsExprs const*, int32_t, DimsExprs* out, int32_t,
        IExprBuilder&) noexcept override
    {
        out[0] = in[8];
        return 0;
    }
    bool supportsFormatCombination(int32_t pos, DynamicPluginTensorDesc const* io, int32_t, int32_t) noexcept override
    {
        static DataType const fixed[] = {DataType::kINT64, DataType::kINT32, DataType::kINT32};
        if (io[pos].desc.format != TensorFormat::kLINEAR)
            return false;
        if (pos < 3)
            return io[pos].desc.type == fixed[pos];
        if (pos >= 5 && pos <= 7)
            return io[pos].desc.type == DataType::kFLOAT;
        if (pos == 3)
            return io[3].desc.type == DataType::kFLOAT || io[3].desc.type == DataType::kHALF
                || io[3].desc.type == DataType::kBF16;
        return io[pos].desc.type == io[3].desc.type; // zxbcdt, y_stock, y: the activation dtype, as xbc
    }
    int32_t configurePlugin(DynamicPluginTensorDesc const*, int32_t nbInputs, DynamicPluginTensorDesc const*, int32_t nbOutputs) noexcept override
    {
        if (nbInputs == kBlockInputs && nbOutputs == 1)
            return 0;
        logError(std::string(kBlockName) + ": " + std::to_string(nbInputs) + " inputs and " + std::to_string(nbOutputs)
            + " outputs; expected 9 (ENGINE_INPUTS of plugins/mamba2_block_launch.py) and 1");
        return 1;
    }
    size_t getWorkspaceSize(DynamicPluginTensorDesc const*, int32_t, DynamicPluginTensorDesc const*, int32_t) const noexcept override
    {
        return sizeof(int64_t); // the staged layer address
    }

    int32_t enqueue(PluginTensorDesc const* inDesc, PluginTensorDesc const* outDesc, void const* const* in,
        void* const* out, void* workspace, cudaStream_t stream) noexcept override
    {
        if (isBuilding())
            return 0;
        if (loadKernel() != 0)
            return 1;
        int64_t const rows = inDesc[2].dims.d[0];
        if (rows == 0)
            return 0;
        if (rows < 0 || rows > 65535) // the grid's z extent
            return 1;
        bool const context = static_cast<int32_t const*>(in[1])[0] == kContext; // host memory
        // stage *rnn_state_ptr (host) into the workspace for the kernel's state_ptr
        *mStateHost = *static_cast<int64_t const*>(in[0]);
        if (cudaMemcpyAsync(workspace, mStateHost, sizeof(int64_t), cudaMemcpyHostToDevice, stream) != cudaSuccess)
            return 1;
        if (context)
        {
            size_t bytes = elementSize(outDesc[0].type);
            for (int32_t d = 0; d < outDesc[0].dims.nbDims; ++d)
                bytes *= outDesc[0].dims.d[d];
            if (cudaMemcpyAsync(out[0], in[8], bytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
                return 1;
        }
        // arguments from the launch table: n, n * (kind, a, b), grid_x, grid_y, threads
        int64_t const n = mTable[0];
        std::vector<void*> ptrs(n);
        std::vector<int32_t> ints(n);
        std::vector<void*> args(n);
        for (int64_t i = 0; i < n; ++i)
        {
            int64_t const kind = mTable[1 + 3 * i], a = mTable[2 + 3 * i], b = mTable[3 + 3 * i];
            switch (kind)
            {
            case kInput:
                ptrs[i] = static_cast<char*>(const_cast<void*>(in[a])) + b * elementSize(inDesc[a].type);
                args[i] = &ptrs[i];
                break;
            case kState: ptrs[i] = workspace; args[i] = &ptrs[i]; break;
            case kOutput: ptrs[i] = out[a]; args[i] = &ptrs[i]; break;
            case kConst: ints[i] = static_cast<int32_t>(a); args[i] = &ints[i]; break;
            case kRows: ints[i] = static_cast<int32_t>(rows); args[i] = &ints[i]; break;
            case kPhase: ints[i] = static_cast<int32_t>(context ? rows + 1 : rows); args[i] = &ints[i]; break;
            default: return 1;
            }
        }
        // plugins/ptx.py exports the PTX without Triton's hidden scratch parameters: none to add.
        unsigned const gx = static_cast<unsigned>(mTable[1 + 3 * n]), gy = static_cast<unsigned>(mTable[2 + 3 * n]);
        unsigned const threads = static_cast<unsigned>(mTable[3 + 3 * n]);
        CUresult const r = cuLaunchKernel(mFunction, gx, gy, static_cast<unsigned>(rows), threads, 1, 1, mSharedBytes,
            reinterpret_cast<CUstream>(stream), args.data(), nullptr);
        return r != CUDA_SUCCESS;
    }

    int32_t onShapeChange(PluginTensorDesc const*, int32_t, PluginTensorDesc const*, int32_t) noexcept override { return 0; }
    IPluginV3* attachToContext(IPluginResourceContext*) noexcept override { return clone(); }
    PluginFieldCollection const* getFieldsToSerialize() noexcept override
    {
        mFields = {PluginField("ptx", mPtx.data(), PluginFieldType::kCHAR, static_cast<int32_t>(mPtx.size())),
            PluginField("kernel_name", mKernelName.data(), PluginFieldType::kCHAR, static_cast<int32_t>(mKernelName.size())),
            PluginField("launch_table", mTable.data(), PluginFieldType::kINT64, static_cast<int32_t>(mTable.size())),
            PluginField("shared_mem", &mSharedBytes, PluginFieldType::kINT32, 1)};
        mFC = {static_cast<int32_t>(mFields.size()), mFields.data()};
        return &mFC;
    }

private:
    int32_t loadKernel()
    {
        if (mFunction != nullptr)
            return 0;
        if (cudaMallocHost(reinterpret_cast<void**>(&mStateHost), sizeof(int64_t)) != cudaSuccess)
            return 1;
        if (cuModuleLoadData(&mModule, mPtx.c_str()) != CUDA_SUCCESS
            || cuModuleGetFunction(&mFunction, mModule, mKernelName.c_str()) != CUDA_SUCCESS)
            return 1;
        return 0;
    }

    std::string mPtx, mKernelName;
    std::vector<int64_t> mTable;
    CUmodule mModule{nullptr};
    CUfunction mFunction{nullptr};
    unsigned mSharedBytes;
    int64_t* mStateHost{nullptr};
    std::vector<PluginField> mFields;
    PluginFieldCollection mFC{};
};

// ----------------------------------------------------------------------------- creators
// The field lists below (getFieldNames) and the names createPlugin reads are those of
// builders/trtllm_engine/hook.py, in its order; TensorRT passes createPlugin the plugin's
// getFieldsToSerialize collection when it deserializes an engine (TensorRTPhase::kRUNTIME) and
// the hook's collection when it adds the layer (kBUILD): both construct the same plugin.

class Mamba2RouteCreator : public IPluginCreatorV3One
{
public:
    Mamba2RouteCreator()
        : mFields{PluginField("scratch_slot", nullptr, PluginFieldType::kINT32, 1)}
        , mFC{static_cast<int32_t>(mFields.size()), mFields.data()}
    {
    }

    IPluginV3* createPlugin(AsciiChar const*, PluginFieldCollection const* fc, TensorRTPhase) noexcept override
    {
        try
        {
            FieldReader fields(kRouteName, fc);
            PluginField const* scratch = fields.get("scratch_slot", PluginFieldType::kINT32, 1);
            if (scratch == nullptr || !fields.onlyFields({"scratch_slot"}))
                return nullptr;
            int32_t const slot = *static_cast<int32_t const*>(scratch->data);
            if (scratch->length != 1 || slot < 0)
                return fields.fail("field scratch_slot is " + std::to_string(slot) + " (" + std::to_string(scratch->length)
                    + " values); expected one value >= 0 (the layout's scratch slot)");
            return new Mamba2Route(slot);
        }
        catch (std::exception const& e)
        {
            logError(std::string(kRouteName) + " createPlugin: " + e.what());
            return nullptr;
        }
    }
    PluginFieldCollection const* getFieldNames() noexcept override { return &mFC; }
    AsciiChar const* getPluginName() const noexcept override { return kRouteName; }
    AsciiChar const* getPluginVersion() const noexcept override { return kRouteVersion; }
    AsciiChar const* getPluginNamespace() const noexcept override { return kNamespace; }

private:
    std::vector<PluginField> mFields;
    PluginFieldCollection mFC;
};

namespace
{
// Why a launch table (LaunchTable.flat: n, n * (kind, a, b), grid_x, grid_y, threads) cannot be
// launched by Mamba2ReplayBlock::enqueue; empty when it can.
std::string launchTableProblem(std::vector<int64_t> const& t)
{
    if (t.empty() || t[0] < 0 || t.size() != static_cast<size_t>(1 + 3 * t[0] + 3))
        return "has " + std::to_string(t.size()) + " values; expected 1 + 3 n + 3 with n = its first value";
    int64_t const n = t[0];
    for (int64_t i = 0; i < n; ++i)
    {
        int64_t const kind = t[1 + 3 * i], a = t[2 + 3 * i], b = t[3 + 3 * i];
        std::string const row = "row " + std::to_string(i) + " (" + std::to_string(kind) + ", " + std::to_string(a) + ", "
            + std::to_string(b) + ")";
        switch (kind)
        {
        case kInput:
            if (a < 0 || a >= kBlockInputs || b < 0)
                return row + ": expected an input index 0 to 8 and an offset >= 0";
            break;
        case kOutput:
            if (a != 0)
                return row + ": expected output 0 (the plugin has one output)";
            break;
        case kConst:
            if (a < INT32_MIN || a > INT32_MAX)
                return row + ": expected an int32 constant";
            break;
        case kState:
        case kRows:
        case kPhase: break;
        default: return row + ": expected kind 0 to 5 (plugins/mamba2_block_launch.py ARG_*)";
        }
    }
    int64_t const gx = t[1 + 3 * n], gy = t[2 + 3 * n], threads = t[3 + 3 * n];
    if (gx < 1 || gx > INT32_MAX || gy < 1 || gy > 65535 || threads < 1 || threads > 1024)
        return "ends with grid_x " + std::to_string(gx) + ", grid_y " + std::to_string(gy) + ", threads " + std::to_string(threads)
            + "; expected 1 <= grid_x < 2^31, 1 <= grid_y <= 65535, 1 <= threads <= 1024";
    return {};
}
} // namespace

class Mamba2ReplayBlockCreator : public IPluginCreatorV3One
{
public:
    Mamba2ReplayBlockCreator()
        : mFields{PluginField("ptx", nullptr, PluginFieldType::kCHAR, 0),
            PluginField("kernel_name", nullptr, PluginFieldType::kCHAR, 0),
            PluginField("launch_table", nullptr, PluginFieldType::kINT64, 0),
            PluginField("shared_mem", nullptr, PluginFieldType::kINT32, 1)}
        , mFC{static_cast<int32_t>(mFields.size()), mFields.data()}
    {
    }

    IPluginV3* createPlugin(AsciiChar const*, PluginFieldCollection const* fc, TensorRTPhase) noexcept override
    {
        try
        {
            FieldReader fields(kBlockName, fc);
            PluginField const* ptx = fields.get("ptx", PluginFieldType::kCHAR, 1);
            PluginField const* kernelName = ptx ? fields.get("kernel_name", PluginFieldType::kCHAR, 1) : nullptr;
            PluginField const* table = kernelName ? fields.get("launch_table", PluginFieldType::kINT64, 4) : nullptr;
            PluginField const* shared = table ? fields.get("shared_mem", PluginFieldType::kINT32, 1) : nullptr;
            if (shared == nullptr || !fields.onlyFields({"ptx", "kernel_name", "launch_table", "shared_mem"}))
                return nullptr;
            std::string ptxText = fieldString(*ptx);
            std::string name = fieldString(*kernelName);
            if (ptxText.empty() || ptxText.find('\0') != std::string::npos)
                return fields.fail("field ptx is empty or has a NUL byte inside; expected the PTX text");
            if (name.empty() || name.find('\0') != std::string::npos)
                return fields.fail("field kernel_name is empty or has a NUL byte inside; expected the entry's name");
            auto const* tableData = static_cast<int64_t const*>(table->data);
            std::vector<int64_t> launch(tableData, tableData + table->length);
            std::string const problem = launchTableProblem(launch);
            if (!problem.empty())
                return fields.fail("field launch_table " + problem);
            int32_t const sharedBytes = *static_cast<int32_t const*>(shared->data);
            if (shared->length != 1 || sharedBytes < 0 || sharedBytes > kMaxSharedBytes)
                return fields.fail("field shared_mem is " + std::to_string(sharedBytes) + " (" + std::to_string(shared->length)
                    + " values); expected one value, 0 to 49152 bytes");
            return new Mamba2ReplayBlock(std::move(ptxText), std::move(name), std::move(launch), sharedBytes);
        }
        catch (std::exception const& e)
        {
            logError(std::string(kBlockName) + " createPlugin: " + e.what());
            return nullptr;
        }
    }
    PluginFieldCollection const* getFieldNames() noexcept override { return &mFC; }
    AsciiChar const* getPluginName() const noexcept override { return kBlockName; }
    AsciiChar const* getPluginVersion() const noexcept override { return kBlockVersion; }
    AsciiChar const* getPluginNamespace() const noexcept override { return kNamespace; }

private:
    std::vector<PluginField> mFields;
    PluginFieldCollection mFC;
};

// ----------------------------------------------------------------------------- registration
// On load (dlopen, LD_PRELOAD): both creators into TensorRT's plugin registry, under kNamespace
// (the namespace argument and the creators' getPluginNamespace agree). The creators live as long
// as the library. Not REGISTER_TENSORRT_PLUGIN: that macro registers with namespace "".
namespace
{
class Registration
{
public:
    Registration() noexcept
    {
        IPluginRegistry* registry = ::getPluginRegistry();
        if (registry == nullptr)
            return;
        if (!registry->registerCreator(mRoute, kNamespace))
            logError(std::string("registration: ") + kRouteName + " version " + kRouteVersion + " is registered already");
        if (!registry->registerCreator(mBlock, kNamespace))
            logError(std::string("registration: ") + kBlockName + " version " + kBlockVersion + " is registered already");
    }

private:
    Mamba2RouteCreator mRoute;
    Mamba2ReplayBlockCreator mBlock;
};

Registration gRegistration;
} // namespace

} // namespace replayssm
