// ReplaySSM engine plugins for TensorRT-LLM v1.2.1's engine flow (docs/engine_flow.md).
// NOT BUILT OR RUN HERE: written against TensorRT 10's IPluginV3 headers, checked by reading only.
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
// Still to write (not here): the two IPluginCreatorV3One classes (fields -> constructors) and
// getCreators() for REGISTER_TENSORRT_PLUGIN / the plugin library's entry point.
//
// The PTX, its kernel name, its shared memory and the launch table (plugins/mamba2_block_launch.py: LaunchTable.flat)
// are plugin fields, serialized with the engine. In TensorRT-LLM's builder, enqueue returns at once
// while IS_BUILDING=1 (TensorRT-LLM's own plugins do the same: the host inputs are not bound then).
#include <NvInferRuntime.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace replayssm
{
using namespace nvinfer1;

namespace
{
constexpr char const* kNamespace = "replayssm";
constexpr int32_t kContext = 0; // TensorRT-LLM RequestType::kCONTEXT

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
    char const* getPluginName() const noexcept override { return "Mamba2Route"; }
    char const* getPluginVersion() const noexcept override { return "1"; }
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
    int32_t configurePlugin(DynamicPluginTensorDesc const*, int32_t, DynamicPluginTensorDesc const*, int32_t) noexcept override
    {
        return 0;
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
    char const* getPluginName() const noexcept override { return "Mamba2ReplayBlock"; }
    char const* getPluginVersion() const noexcept override { return "1"; }
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
        return io[pos].desc.type == io[3].desc.type; // xbc, zxbcdt, y_stock, y: the activation dtype
    }
    int32_t configurePlugin(DynamicPluginTensorDesc const*, int32_t, DynamicPluginTensorDesc const*, int32_t) noexcept override
    {
        return 0;
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

} // namespace replayssm
